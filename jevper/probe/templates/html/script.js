(function () {
  "use strict";
  var panel = document.getElementById("evidence");
  var body = document.getElementById("evidence-body");
  var shown = document.getElementById("shown");
  var cells = document.querySelectorAll("button.cell");
  var selected = null;

  function show(button) {
    var source = document.getElementById(button.getAttribute("data-evidence"));
    if (!source) { return; }
    body.replaceChildren(source.content.cloneNode(true));
    if (selected) { selected.setAttribute("aria-pressed", "false"); }
    selected = button;
    button.setAttribute("aria-pressed", "true");
    panel.classList.add("open");
    // The address names the selected cell, so a link can open the page on that evidence.
    history.replaceState(null, "", "#" + button.id);
  }

  function close() {
    panel.classList.remove("open");
    if (selected) {
      selected.setAttribute("aria-pressed", "false");
      selected.focus({ preventScroll: true });
    }
  }

  cells.forEach(function (button) {
    button.addEventListener("click", function () { show(button); });
    button.addEventListener("focus", function () { show(button); });
  });
  document.getElementById("evidence-close").addEventListener("click", close);
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") { close(); }
  });

  function filter(surface) {
    var rows = document.querySelectorAll("tr.probe-row");
    var total = rows.length;
    var visible = 0;
    rows.forEach(function (row) {
      var keep = surface === "all" || row.getAttribute("data-surface") === surface;
      row.hidden = !keep;
      if (keep) { visible += 1; }
    });
    document.querySelectorAll("tbody.topic").forEach(function (group) {
      group.hidden = group.querySelector("tr.probe-row:not([hidden])") === null;
    });
    shown.textContent = "Showing " + visible + " of " + total + " probes";
  }

  document.querySelectorAll('input[name="surface"]').forEach(function (input) {
    input.addEventListener("change", function () { filter(input.value); });
  });

  var linked = location.hash ? document.getElementById(location.hash.slice(1)) : null;
  if (linked && linked.classList.contains("cell")) {
    show(linked);
    linked.scrollIntoView({ block: "center", inline: "center" });
  }
})();
