"""AttributeDict: a dict whose keys are attributes."""

from __future__ import annotations

import copy
import pickle

import pytest

from fabric_core.utilities.attribute_dict import AttributeDict


def test_keys_are_attributes() -> None:
    hparams = AttributeDict(lr=0.1)
    hparams.batch_size = 32
    assert hparams.lr == 0.1
    assert hparams["batch_size"] == 32
    assert dict(hparams) == {"lr": 0.1, "batch_size": 32}


def test_deleting_an_attribute_deletes_the_key() -> None:
    hparams = AttributeDict(lr=0.1)
    del hparams.lr
    assert "lr" not in hparams


def test_missing_attributes_raise_attribute_error() -> None:
    hparams = AttributeDict()
    with pytest.raises(AttributeError, match="'AttributeDict' object has no attribute 'lr'"):
        _ = hparams.lr
    with pytest.raises(AttributeError, match="no attribute 'lr'"):
        del hparams.lr
    assert not hasattr(hparams, "lr")


def test_repr_is_sorted_and_aligned() -> None:
    assert repr(AttributeDict(zeta=1, a="x")) == "'a':    'x'\n'zeta': 1"


def test_repr_of_an_empty_dict() -> None:
    assert repr(AttributeDict()) == "AttributeDict()"


def test_copies_and_pickles() -> None:
    hparams = AttributeDict(lr=0.1, layers=[1, 2])
    assert copy.deepcopy(hparams) == hparams
    restored = pickle.loads(pickle.dumps(hparams))
    assert type(restored) is AttributeDict
    assert restored.layers == [1, 2]
