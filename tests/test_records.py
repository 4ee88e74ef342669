"""records: the frozen dataclass frozen_record makes behaves as ``@dataclass(frozen=True)`` would, and the named
tuple record_tuple makes as ``typing.NamedTuple`` would."""

import dataclasses
import inspect
import pickle
from typing import NamedTuple, Optional

import pytest

from sglang_spec_plugins.records import frozen_record, record_tuple


@frozen_record
class Shape:
    name: str
    size: int = 1
    tags: dict = dataclasses.field(default_factory=dict)
    note: Optional[str] = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.size < 1:
            raise ValueError("size must be positive")


@dataclasses.dataclass(frozen=True)
class Generated:
    name: str
    size: int = 1
    tags: dict = dataclasses.field(default_factory=dict)
    note: Optional[str] = dataclasses.field(default=None, compare=False, repr=False)


def test_it_is_the_frozen_dataclass_the_decorator_would_make():
    shape = Shape("a", 2, note="x")
    assert dataclasses.is_dataclass(shape) and Shape.__dataclass_params__.frozen
    assert [f.name for f in dataclasses.fields(Shape)] == [f.name for f in dataclasses.fields(Generated)]
    assert dataclasses.asdict(shape) == dataclasses.asdict(Generated("a", 2, note="x"))
    assert dataclasses.replace(shape, size=3) == Shape("a", 3)
    assert repr(shape).replace("Shape", "Generated") == repr(Generated("a", 2, note="x"))
    assert str(inspect.signature(Shape)) == str(inspect.signature(Generated))
    with pytest.raises(dataclasses.FrozenInstanceError):
        shape.size = 3


def test_it_is_frozen_as_the_decorator_makes_it():
    shape, generated = Shape("a"), Generated("a")
    for obj in (shape, generated):
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'other'"):
            obj.other = 1  # any attribute, on the class itself
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'name'"):
            del obj.name

    @dataclasses.dataclass(frozen=True)
    class Bigger(Shape):
        extra: int = 0

    bigger = Bigger("b", extra=2)
    assert bigger.extra == 2 and dataclasses.fields(Bigger)[-1].name == "extra"
    with pytest.raises(dataclasses.FrozenInstanceError):
        bigger.size = 2
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
        @dataclasses.dataclass
        class Thawed(Shape):
            pass

    class Plain(Shape):  # not a dataclass: its own attributes may be set, its fields not
        pass

    plain = Plain("c")
    plain.other = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.name = "d"


def test_a_dataclass_base_is_refused():
    with pytest.raises(TypeError, match="no dataclass base"):
        @frozen_record
        class Derived(Generated):
            pass


def test_construction_equality_and_hash():
    assert Shape("a").tags == {} and Shape("a").tags is not Shape("a").tags  # the factory, per instance
    assert Shape("a", 2, note="x") == Shape(name="a", size=2, note="y")  # note is not compared
    assert Shape("a") != Shape("b") and Shape("a") != Generated("a")
    assert hash(Shape("a", tags=())) == hash(Shape("a", tags=(), note="z"))
    with pytest.raises(ValueError, match="size must be positive"):  # __post_init__ runs
        Shape("a", 0)


@pytest.mark.parametrize("args, kwargs, message", [
    ((), {}, "missing required argument: 'name'"),
    (("a",), {"name": "b"}, "multiple values for argument 'name'"),
    (("a",), {"colour": 1}, "unexpected keyword argument 'colour'"),
    (("a", 1, {}, None, 5), {}, "takes 4 positional arguments but 5 were given"),
])
def test_wrong_arguments_are_refused(args, kwargs, message):
    with pytest.raises(TypeError, match=message):
        Shape(*args, **kwargs)


def test_keyword_only_fields_are_refused():
    with pytest.raises(TypeError, match="no keyword-only"):
        @frozen_record
        class KeywordOnly:
            name: str = dataclasses.field(kw_only=True)


@record_tuple
class Pair:
    """Two values."""

    left: int
    right: Optional[str] = None
    """A field's docstring."""

    @property
    def both(self) -> tuple:
        return self.left, self.right

    def __str__(self) -> str:
        return f"{self.left}/{self.right}"


class TypedPair(NamedTuple):
    """Two values."""

    left: int
    right: Optional[str] = None

    @property
    def both(self) -> tuple:
        return self.left, self.right

    def __str__(self) -> str:
        return f"{self.left}/{self.right}"


def test_it_is_the_named_tuple_typing_would_make():
    pair, typed = Pair(1), TypedPair(1)
    assert pair == typed == (1, None) and isinstance(pair, tuple) and Pair.__bases__ == TypedPair.__bases__ == (tuple,)
    assert Pair._fields == TypedPair._fields and Pair._field_defaults == TypedPair._field_defaults == {"right": None}
    assert repr(pair) == repr(typed).replace("TypedPair", "Pair") and str(pair) == str(typed) == "1/None"
    assert pair.both == typed.both and pair._replace(right="x") == Pair(1, "x") and type(pair._replace()) is Pair
    assert Pair._make([2, "y"]) == Pair(left=2, right="y") and pair._asdict() == typed._asdict()
    assert str(inspect.signature(Pair)) == str(inspect.signature(TypedPair))
    assert Pair.__doc__ == TypedPair.__doc__ and Pair.__qualname__ == "Pair" and Pair.__module__ == __name__
    assert list(Pair.__annotations__) == ["left", "right"] and pickle.loads(pickle.dumps(Pair(3, "z"))) == (3, "z")
    with pytest.raises(AttributeError):
        pair.left = 2


def test_a_field_without_a_default_after_one_with_a_default_is_refused():
    with pytest.raises(TypeError, match="a field without a default follows one with a default"):
        @record_tuple
        class Misordered:
            first: int = 0
            second: int


@pytest.mark.parametrize("args, kwargs, message", [
    ((), {}, "missing required argument: 'left'"),
    ((1,), {"left": 2}, "multiple values for argument 'left'"),
    ((1,), {"colour": 1}, "unexpected keyword argument 'colour'"),
    ((1, "a", 3), {}, "takes 2 positional arguments but 3 were given"),
])
def test_a_named_tuple_refuses_wrong_arguments_as_its_constructor_would(args, kwargs, message):
    with pytest.raises(TypeError):
        TypedPair(*args, **kwargs)
    with pytest.raises(TypeError, match=message):
        Pair(*args, **kwargs)


def test_a_named_tuple_made_or_replaced_with_the_wrong_fields_is_refused():
    with pytest.raises(TypeError, match="Expected 2 arguments, got 3"):
        Pair._make([1, 2, 3])
    with pytest.raises(ValueError, match=r"unexpected field names: \['colour'\]"):
        Pair(1)._replace(colour=2)
    assert Pair(1, right="x") == Pair(left=1, right="x") == Pair(*[1, "x"]) and Pair.left.__doc__ == TypedPair.left.__doc__
    match Pair(4, "w"):
        case Pair(left, right):
            assert (left, right) == (4, "w")
