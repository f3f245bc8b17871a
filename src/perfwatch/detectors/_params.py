"""scikit-learn's parameter protocol for the light detectors.

``sklearn.base.BaseEstimator`` cannot be a base of the E-Divisive classes:
importing it loads scikit-learn and scipy (seconds), which ``perfwatch
analyze`` must not pay.  This mixin gives the same ``get_params`` /
``set_params`` behaviour, so ``sklearn.base.clone`` works on them as on any
estimator.
"""

from __future__ import annotations

import inspect
from typing import Any, Self

__all__ = ["ParamsMixin"]


class ParamsMixin:
    """Parameters are the keyword arguments of ``__init__``, stored as given."""

    @classmethod
    def _get_param_names(cls) -> list[str]:
        signature = inspect.signature(cls.__init__)
        return sorted(
            p.name
            for p in signature.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters (``deep`` is accepted for scikit-learn;
        no parameter is itself an estimator)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> Self:
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"invalid parameter {name!r} for {type(self).__name__}; "
                    f"valid parameters: {', '.join(valid)}"
                )
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        changed = ", ".join(
            f"{name}={value!r}"
            for name, value in self.get_params().items()
            if value != inspect.signature(type(self).__init__).parameters[name].default
        )
        return f"{type(self).__name__}({changed})"
