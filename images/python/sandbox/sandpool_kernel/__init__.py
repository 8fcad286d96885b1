"""The sandpool kernel's code: a language-agnostic supervisor and one worker per language.
kernel.py, beside this package, is the program the image runs, and its docstring maps the files.
"""
