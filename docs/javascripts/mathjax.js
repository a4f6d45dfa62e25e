// TeX on the site's own pages ($...$, $$...$$ and \(...\), marked by pymdownx.arithmatex) with the MathJax 2.7 that
// ships with the site (javascripts/mathjax/, copied at build time): formulas render with no network.  A notebook page
// loads the same MathJax itself (nbconvert's template), so this script leaves those pages alone.
(function () {
  if (document.querySelector(".jupyter-wrapper")) return;
  var here = document.currentScript && document.currentScript.src;
  if (!here) return;
  window.MathJax = {
    tex2jax: {
      inlineMath: [["\\(", "\\)"]],
      displayMath: [["\\[", "\\]"]],
      processEscapes: true,
      processEnvironments: true,
      ignoreClass: ".*",
      processClass: "arithmatex",
    },
    "HTML-CSS": { availableFonts: [], preferredFont: null, webFont: "STIX-Web" },
    showMathMenu: false,
  };
  var s = document.createElement("script");
  s.src = here.replace(/mathjax\.js(\?.*)?$/, "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe");
  s.async = true;
  document.head.appendChild(s);
})();
