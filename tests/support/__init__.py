"""What the tests share: reading the notebooks and loading their helpers (notebook_code), the verdicts
and promises read from the manifest, the exercise probes, the notebooks' own runs under nbval
(notebook_items, a pytest plugin) and their pages in JupyterLab (jupyterlab_page), the branch coverage of
the notebooks' helpers (helper_coverage, a pytest plugin), and the checks several rules share
(shared_checks), and what several test files of one notebook need (notebook_04, notebook_05,
notebook_08, notebook_09). No test module imports another test module: what two need is here.
"""
