"""The optional C extension (onnxsurgeon/_scan.c, issue 14); everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and load runs its Python
passes (onnxsurgeon/scan.py), with the same answers, slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("onnxsurgeon._scan", ["onnxsurgeon/_scan.c"], optional=True)])
