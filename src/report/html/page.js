// tcpdoctor report: the exchange picker and sortable tables. No external code.
(function () {
  "use strict";
  var pick = document.getElementById("ladder-pick");
  function show(value) {
    var views = document.querySelectorAll(".ladder-view");
    for (var i = 0; i < views.length; i++) {
      views[i].hidden = views[i].getAttribute("data-i") !== value;
    }
  }
  if (pick) {
    pick.addEventListener("change", function () { show(pick.value); history.replaceState(null, "", "#x=" + pick.value); });
    // A link to one exchange: REPORT.html#x=N.
    var m = /^#x=(\d+)$/.exec(location.hash);
    if (m && document.querySelector('.ladder-view[data-i="' + m[1] + '"]')) { pick.value = m[1]; show(m[1]); }
  }
  function cellValue(td) {
    var v = td.getAttribute("data-v");
    if (v !== null) { return parseFloat(v); }
    var text = td.textContent.trim();
    // Counts sort as numbers ("97" before "128"), other text as text.
    return /^-?\d+(\.\d+)?$/.test(text) ? parseFloat(text) : text.toLowerCase();
  }
  var tables = document.querySelectorAll("table.sortable");
  for (var t = 0; t < tables.length; t++) {
    (function (table) {
      var heads = table.querySelectorAll("th");
      for (var h = 0; h < heads.length; h++) {
        (function (th, col) {
          th.addEventListener("click", function () {
            var asc = th.getAttribute("aria-sort") !== "ascending";
            for (var k = 0; k < heads.length; k++) { heads[k].removeAttribute("aria-sort"); }
            th.setAttribute("aria-sort", asc ? "ascending" : "descending");
            var body = table.tBodies[0];
            var rows = Array.prototype.slice.call(body.rows);
            rows.sort(function (a, b) {
              var x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
              var c = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
              return asc ? c : -c;
            });
            for (var r = 0; r < rows.length; r++) { body.appendChild(rows[r]); }
          });
        })(heads[h], h);
      }
    })(tables[t]);
  }
  document.body.setAttribute("data-ready", "1");
})();
