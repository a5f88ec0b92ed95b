"""The nodes of a project, one module per kind; compiler/build.py drives them."""
