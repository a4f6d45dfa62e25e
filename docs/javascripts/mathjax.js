// TeX on the site's own pages ($...$, $$...$$ and \(...\), marked by pymdownx.arithmatex) with MathJax 3.
// A notebook page loads MathJax 2 itself (nbconvert's template), so this script leaves those pages alone.
(function () {
  if (document.querySelector(".jupyter-wrapper")) return;
  window.MathJax = {
    tex: {
      inlineMath: [["\\(", "\\)"]],
      displayMath: [["\\[", "\\]"]],
      processEscapes: true,
      processEnvironments: true,
    },
    options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex" },
  };
  var s = document.createElement("script");
  s.src = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js";
  s.async = true;
  document.head.appendChild(s);
})();
