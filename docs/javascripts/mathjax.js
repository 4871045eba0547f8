// MathJax 3 for the site: pymdownx.arithmatex (generic mode) wraps the math of Markdown pages and docstrings
// in \(...\) / \[...\] inside elements of class "arithmatex"; the executed tutorials (mkdocs-jupyter)
// keep $...$ / $$...$$ in their Markdown cells (class "jp-RenderedMarkdown"). Nothing else is typeset.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex|jp-RenderedMarkdown",
  },
};

document$.subscribe(() => {
  MathJax.startup.output.clearCache();
  MathJax.typesetClear();
  MathJax.texReset();
  MathJax.typesetPromise();
});
