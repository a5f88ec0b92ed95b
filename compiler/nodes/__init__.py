"""The nodes of a project, one module per kind; compiler/driver.py drives them."""
