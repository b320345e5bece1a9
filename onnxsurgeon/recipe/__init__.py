"""Recipes: a sequence of rewrites as a YAML or JSON file, applied in memory with one load and
one save, with verify checkpoints and provenance; fleets of models; Ray for clusters.

* :data:`STEPS` -- the step registry (verb -> library call + typed keys): the recipe format;
* :func:`load_recipe` / :func:`parse_recipe` -- read and check a recipe;
* :func:`apply_recipe` -- run it on a model in memory (``plan=True``: check and account only);
* :func:`recipe_from_log` -- the recipe that replays a model's recorded rewrites.
"""

from __future__ import annotations

from .apply import (
    RECIPE_KEY,
    RECIPE_SHA_KEY,
    ApplyResult,
    StepOutcome,
    apply_recipe,
    recorded_recipe,
)
from .format import FORMAT_VERSION, Recipe, RecipeError, Step, load_recipe, parse_recipe
from .fromlog import recipe_from_log
from .spec import Kind, Param, StepContext, Verb
from .steps import STEPS

__all__ = [
    "FORMAT_VERSION", "RECIPE_KEY", "RECIPE_SHA_KEY", "STEPS", "ApplyResult", "Kind", "Param",
    "Recipe", "RecipeError", "Step", "StepContext", "StepOutcome", "Verb", "apply_recipe", "load_recipe",
    "parse_recipe", "recipe_from_log", "recorded_recipe",
]
