"""The exception tree: one base class that callers catch, drawn whole in the module docstring."""

from __future__ import annotations

import inspect

from monitor.core import errors


def _exported() -> list[type[BaseException]]:
    return [value for value in (getattr(errors, name) for name in errors.__all__)
            if inspect.isclass(value)]


def test_every_exported_exception_is_a_monitor_error() -> None:
    outside = [cls.__name__ for cls in _exported() if not issubclass(cls, errors.MonitorError)]
    assert outside == []


def test_every_exception_class_of_the_module_is_exported_and_drawn_in_the_tree() -> None:
    defined = {name for name, value in vars(errors).items()
               if inspect.isclass(value) and issubclass(value, BaseException)
               and value.__module__ == errors.__name__}
    assert defined == {cls.__name__ for cls in _exported()}
    tree = errors.__doc__ or ""
    assert "\n    MonitorError\n" in tree
    drawn = [name for name in sorted(defined - {"MonitorError"}) if f"── {name} " in tree]
    assert drawn == sorted(defined - {"MonitorError"})
