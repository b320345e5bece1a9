"""What every verb's result shares: a notebook shows it as the drawing of what it changed."""

from __future__ import annotations


class Shown:
    """Mixin of the ``<Verb>Result`` types: ``_repr_html_`` (Jupyter's rich display) draws the
    rewrite (:func:`onnxsurgeon.notebook.result_html`); plain ``repr`` stays the dataclass's."""

    def _repr_html_(self) -> str:
        from ..notebook import result_html

        return result_html(self)
