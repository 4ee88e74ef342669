"""records.frozen_record: the frozen dataclass it makes behaves as ``@dataclass(frozen=True)`` would."""

import dataclasses
import inspect
from typing import Optional

import pytest

from sglang_spec_plugins.records import frozen_record


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
