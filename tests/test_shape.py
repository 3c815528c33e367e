"""Shapes, slicing and ValueMesh: pure geometry, no transport."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danaus import Extent, Point, Shape, ValueMesh


def grid(**sizes: int) -> Shape:
    return Shape.from_extent(Extent.from_dict(sizes))


def test_extent_and_point():
    extent = Extent(["hosts", "gpus"], [2, 4])
    assert dict(extent) == {"hosts": 2, "gpus": 4}
    assert extent.nelements == 8
    point = Point(6, extent)
    assert dict(point) == {"hosts": 1, "gpus": 2}
    assert pickle.loads(pickle.dumps(point)) == point
    with pytest.raises(ValueError):
        Point(8, extent)
    with pytest.raises(ValueError):
        Extent(["a", "a"], [1, 2])
    with pytest.raises(ValueError):
        Extent(["a"], [0])


def test_slice_int_drops_a_dimension_and_slice_keeps_it():
    shape = grid(hosts=2, gpus=4)
    assert shape.slice(hosts=1).labels == ("gpus",)
    assert shape.slice(hosts=1).ranks() == [4, 5, 6, 7]
    kept = shape.slice(gpus=slice(1, 4, 2))
    assert dict(kept.extent) == {"hosts": 2, "gpus": 2}
    assert kept.ranks() == [1, 3, 5, 7]
    assert shape.slice(gpus=-1).ranks() == [3, 7]
    with pytest.raises(IndexError):
        shape.slice(gpus=4)
    with pytest.raises(ValueError, match="no dimension"):
        shape.slice(nodes=0)
    with pytest.raises(ValueError, match="empty"):
        shape.slice(gpus=slice(2, 2))


def test_split_flatten_rename():
    shape = grid(hosts=4, gpus=8)
    split = shape.split(hosts=("dp", "pp"), pp=2)
    assert dict(split.extent) == {"dp": 2, "pp": 2, "gpus": 8}
    assert split.ranks() == shape.ranks()
    assert split.slice(pp=1, dp=0).ranks() == list(range(8, 16))
    assert shape.flatten("all").ranks() == list(range(32))
    assert dict(shape.rename(gpus="workers").extent) == {"hosts": 4, "workers": 8}
    with pytest.raises(ValueError, match="dense"):
        shape.slice(gpus=slice(0, 2)).flatten("x")
    with pytest.raises(ValueError, match="divisible"):
        shape.split(hosts=("a", "b"), b=3)


def test_value_mesh_coordinates_and_slicing():
    shape = grid(x=2, y=3)
    vm = ValueMesh(shape, [10 * p["x"] + p["y"] for p in (shape.point(i) for i in range(6))])
    assert vm.item(x=1, y=2) == 12
    assert vm.get(4) == 11
    assert [dict(p) for p, _ in vm.items()][:2] == [{"x": 0, "y": 0}, {"x": 0, "y": 1}]
    row = vm.slice(x=1)
    assert list(row.values()) == [10, 11, 12]
    assert row.item(y=0) == 10
    assert pickle.loads(pickle.dumps(vm)) == vm
    with pytest.raises(KeyError):
        vm.item(x=0)
    with pytest.raises(ValueError):
        ValueMesh(shape, [1, 2])


dims = st.lists(st.integers(1, 4), min_size=1, max_size=3)


@given(dims, st.data())
def test_slicing_selects_exactly_the_chosen_coordinates(sizes, data):
    labels = [f"d{i}" for i in range(len(sizes))]
    shape = Shape.from_extent(Extent(labels, sizes))
    selection = {}
    for label, size in zip(labels, sizes):
        if data.draw(st.booleans()):
            start = data.draw(st.integers(0, size - 1))
            stop = data.draw(st.integers(start + 1, size))
            step = data.draw(st.integers(1, 2))
            selection[label] = slice(start, stop, step)
    sliced = shape.slice(**selection)
    expected = [
        r
        for r in range(len(shape))
        if all(
            shape.point(r)[k] in range(*v.indices(sizes[labels.index(k)]))
            for k, v in selection.items()
        )
    ]
    assert sliced.ranks() == expected
    assert len(sliced) == len(expected)
