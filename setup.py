"""The package list, found rather than written by hand; everything else is in pyproject.toml.

pyproject.toml's ``[tool.setuptools] packages`` is either a list or one ``find`` directive, and ``find``
names a folder's packages after the folder: it cannot ship the top-level ``conf/`` as ``kvx.conf``
(``package-dir`` in pyproject.toml maps it). So the packages are found here: every package folder under
``kvx/``; the ``hydra_plugins`` namespace and its folders (there is no ``hydra_plugins/__init__.py``:
other distributions' Hydra plugins share the namespace); and ``conf/`` with every folder under it, as
``kvx.conf``. ``hydra_plugins`` itself is listed so that an editable install maps the namespace to its
folder: else ``hydra_plugins.kvx`` imports but Hydra's plugin scan (``pkgutil`` over
``hydra_plugins.__path__``) does not see it. tests/test_plugins.py builds the wheel and checks it.
"""

from setuptools import find_namespace_packages, setup

kvx = find_namespace_packages(include=["kvx", "kvx.*", "hydra_plugins", "hydra_plugins.*"])
conf = ["kvx.conf", *(f"kvx.conf.{p}" for p in find_namespace_packages(where="conf"))]
setup(packages=[*kvx, *conf])
