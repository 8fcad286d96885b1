"""The file helper's code: files.py, beside this package, is the program the daemon runs (its
docstring describes the operations); fs.py holds its errors, output and workspace walking,
tar.py its snapshots (tar, untar).
"""
