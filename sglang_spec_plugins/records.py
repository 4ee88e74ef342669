"""Record classes made without generating or checking code per class.

``@dataclass(frozen=True)`` writes each class's ``__init__``, ``__repr__``,
``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__`` as source text
and compiles it (``exec``): 0.6-0.9 ms a class, in every SGLang process that
imports it. :func:`frozen_record` makes the same frozen dataclass
(``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` work,
``__dataclass_params__`` says frozen, a dataclass subclass must be frozen too)
with those methods written once here: the constructor takes the fields by
position or name, with their defaults and default factories, then calls
``__post_init__``; equality (same class) and the hash are over the fields that
``compare``; the repr shows the fields that ``repr``; ``inspect.signature``
gives the fields; assigning or deleting a field raises ``FrozenInstanceError``
(any attribute, on the class itself), as the generated methods do.

``class X(typing.NamedTuple)`` checks each field's annotation, compiling a
postponed one (``from __future__ import annotations``): 0.1-0.2 ms a class;
``collections.namedtuple`` under it writes and evaluates a constructor and
defines its methods again for every class (about 30 us). :func:`record_tuple`
makes the same named tuple from a plain class body with methods written once
here (the constructor takes the fields by position or name, with their
defaults; ``_make``, ``_replace``, ``_asdict``, the repr and pickling behave
as a named tuple's) and without the check (the annotations stay as written).
"""

from __future__ import annotations

import dataclasses
import inspect
from operator import itemgetter
from typing import Any, Iterable, Tuple, TypeVar

try:  # the field accessor collections.namedtuple uses, where the interpreter has it
    from _collections import _tuplegetter as _field
except ImportError:  # pragma: no cover
    def _field(index: int, doc: str) -> property:
        return property(itemgetter(index), doc=doc)

T = TypeVar("T", bound=type)


def frozen_record(cls: T) -> T:
    """``cls`` as a frozen dataclass with the shared methods (no dataclass base, no keyword-only or
    ``init=False`` fields)."""
    if any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:]):
        raise TypeError(f"{cls.__name__}: frozen_record takes no dataclass base")
    cls.__init__, cls.__repr__, cls.__eq__, cls.__hash__ = _init, _repr, _eq, _hash
    cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)  # frozen below, as frozen=True would make it
    found = dataclasses.fields(cls)
    if any(f.kw_only or not f.init for f in found):
        raise TypeError(f"{cls.__name__}: frozen_record takes no keyword-only or init=False fields")
    cls.__setattr__, cls.__delattr__ = _frozen(cls, tuple(f.name for f in found))
    cls.__dataclass_params__.frozen = True  # what a dataclass subclass is held to
    cls._record_init = tuple((f.name, f.default, f.default_factory) for f in found)
    cls._record_compared = tuple(f.name for f in found if f.compare)
    cls._record_shown = tuple(f.name for f in found if f.repr)
    cls.__signature__ = _Signature(returns=None)  # a dataclass's constructor is shown returning None
    return cls


def _frozen(cls: type, names: Tuple[str, ...]):
    """The ``__setattr__`` and ``__delattr__`` that ``@dataclass(frozen=True)`` writes for ``cls``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    __setattr__.__qualname__, __delattr__.__qualname__ = f"{cls.__qualname__}.__setattr__", f"{cls.__qualname__}.__delattr__"
    return __setattr__, __delattr__


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"


class _Signature:
    """A record class's ``__signature__`` (what ``inspect.signature`` and
    ``help`` show), made from its ``_record_init`` and annotations when asked,
    not when the class is made: as a dataclass or a named tuple shows it (a
    default factory as ``<factory>``)."""

    def __init__(self, returns: Any):
        self.returns = returns

    def __get__(self, instance: Any, owner: type) -> inspect.Signature:
        annotations = owner.__annotations__
        return inspect.Signature([
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotations.get(name, inspect.Parameter.empty),
                              default=default if default is not dataclasses.MISSING
                              else inspect.Parameter.empty if factory is dataclasses.MISSING else _Factory())
            for name, default, factory in owner._record_init], return_annotation=self.returns)


def _init(self, *args: Any, **kwargs: Any) -> None:
    fields = self._record_init
    for (name, _, _), value in zip(fields, _arguments(type(self).__name__, fields, args, kwargs)):
        object.__setattr__(self, name, value)
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _arguments(name: str, fields: Tuple[Tuple[str, Any, Any], ...], args: tuple, kwargs: dict) -> list:
    """The values a constructor of ``name`` takes for ``fields`` (each ``(field, default, default factory)``,
    ``dataclasses.MISSING`` where there is none) from ``args`` and ``kwargs`` (emptied of the fields)."""
    if len(args) > len(fields):
        raise TypeError(f"{name}() takes {len(fields)} positional arguments but {len(args)} were given")
    repeated = [field for field, _, _ in fields[:len(args)] if field in kwargs]
    if repeated:
        raise TypeError(f"{name}() got multiple values for argument {repeated[0]!r}")
    values = list(args)
    for field, default, factory in fields[len(args):]:
        if field in kwargs:
            values.append(kwargs.pop(field))
        elif default is not dataclasses.MISSING:
            values.append(default)
        elif factory is not dataclasses.MISSING:
            values.append(factory())
        else:
            raise TypeError(f"{name}() missing required argument: {field!r}")
    if kwargs:  # what is left names no field
        raise TypeError(f"{name}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    return values


def _values(self, names: Tuple[str, ...]) -> tuple:
    return tuple(getattr(self, name) for name in names)


def _repr(self) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._record_shown)
    return f"{type(self).__qualname__}({shown})"


def _eq(self, other: Any) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self, self._record_compared) == _values(other, other._record_compared)


def _hash(self) -> int:
    return hash(_values(self, self._record_compared))


_NOT_COPIED = frozenset({"__dict__", "__weakref__", "__module__", "__annotations__"})


def record_tuple(cls: T) -> T:
    """What ``class cls(typing.NamedTuple)`` makes, from ``cls``'s body: the
    annotated names are the fields, in order, a value given to one is its
    default; the docstring, methods and properties are the tuple's
    (``_fields``, ``_field_defaults``, ``_make``, ``_replace``, ``_asdict`` as
    for any named tuple). No zero-argument ``super()`` (nor in a NamedTuple)."""
    own = vars(cls)
    annotations = dict(own.get("__annotations__", {}))
    fields = tuple(annotations)
    given = [name for name in fields if name in own]
    if given != list(fields[len(fields) - len(given):]):
        raise TypeError(f"{cls.__name__}: a field without a default follows one with a default")
    namespace = dict(_TUPLE_METHODS, __slots__=(), __match_args__=fields, _fields=fields,
                     _field_defaults={name: own[name] for name in given}, __module__=cls.__module__,
                     _record_init=tuple((name, own.get(name, dataclasses.MISSING), dataclasses.MISSING) for name in fields),
                     __signature__=_Signature(returns=inspect.Signature.empty),
                     __qualname__=cls.__qualname__, __annotations__=annotations,
                     __doc__=f"{cls.__name__}({', '.join(fields)})")
    namespace.update((name, _field(i, f"Alias for field number {i}")) for i, name in enumerate(fields))
    namespace.update((name, value) for name, value in own.items()
                     if name not in _NOT_COPIED and name not in fields and not (name == "__doc__" and value is None))
    return type(cls.__name__, (tuple,), namespace)


def _new(cls, *args: Any, **kwargs: Any):
    if kwargs or len(args) != len(cls._fields):
        args = _arguments(cls.__name__, cls._record_init, args, kwargs)
    return tuple.__new__(cls, args)


def _make(cls, iterable: Iterable):
    made = tuple.__new__(cls, iterable)
    if len(made) != len(cls._fields):
        raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(made)}")
    return made


def _replace(self, **changes: Any):
    made = self._make(map(changes.pop, self._fields, self))
    if changes:
        raise ValueError(f"Got unexpected field names: {list(changes)!r}")
    return made


def _asdict(self) -> dict:
    return dict(zip(self._fields, self))


def _tuple_repr(self) -> str:
    shown = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self))
    return f"{type(self).__name__}({shown})"


def _getnewargs(self) -> tuple:
    return tuple(self)


_TUPLE_METHODS = {"__new__": _new, "_make": classmethod(_make), "_replace": _replace, "_asdict": _asdict,
                  "__repr__": _tuple_repr, "__getnewargs__": _getnewargs}
