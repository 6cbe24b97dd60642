"""Where this code runs: a Jupyter kernel (whose outputs are kept in the notebook) or not."""

from __future__ import annotations


def in_jupyter() -> bool:
    """True inside a Jupyter kernel (JupyterLab, papermill, nbconvert), not in plain or terminal Python."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None
