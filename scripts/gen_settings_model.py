"""Write src/tokenrace/model/settings.py, manifest.json's form of a run's settings, from the settings'
own declarations (`tokenrace.runs.settings.BenchSettings` and the types it holds), so that each
setting is declared once. Run after adding or changing a setting; tests/runs/test_saved_settings.py
fails while the file is stale.

The form follows `SAVED_NAMES` and `SAVED_FIELDS` (runs/settings.py). Every field may be absent and
reads as None (a file of an older version, a run imported from another tool); numbers keep the JSON
type they were given in (`Number`); a field of several choices (`Literal`) is kept as text, so that a
file naming a choice this version does not know still reads.

The module's docstring is kept as written there; everything after it is generated.
`python scripts/gen_settings_model.py [PATH]` (default: the module in this checkout).
"""

from __future__ import annotations

import sys
import types
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path

from pydantic import BaseModel, JsonValue

from tokenrace.runs.settings import SAVED_FIELDS, SAVED_NAMES, BenchSettings, SavedField

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "src" / "tokenrace" / "model" / "settings.py"

ROOT_DOC = "What the run was asked to do, as saved in manifest.json."


class _Writer:
    def __init__(self) -> None:
        self.classes: list[str] = []
        self.done: set[type] = set()
        self.imports: dict[str, set[str]] = {"pydantic": set(), "tokenrace.model.base": {"_Model"}}
        self.annotated = False

    def need(self, module: str, name: str) -> None:
        self.imports.setdefault(module, set()).add(name)

    def render(self, tp: object, where: str) -> str:
        """The saved form's annotation of a runtime type."""
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp is type(None):
            return "None"
        if tp is JsonValue:
            self.need("pydantic", "JsonValue")
            return "JsonValue"
        if tp is float:
            return "Number"
        if tp in (bool, int, str):
            return typing.cast(type, tp).__name__
        if tp is Path:
            return "str"
        if origin in (typing.Union, types.UnionType):
            parts = [self.render(a, where) for a in args]
            return " | ".join(dict.fromkeys(p for p in parts if p != "None")) + (" | None" if "None" in parts else "")
        if origin is typing.Literal and all(isinstance(a, str) for a in args):
            return "str"
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return f"list[{self.render(args[0], where)}]"
        if origin in (tuple, list, dict):
            name = typing.cast(type, origin).__name__
            return f"{name}[{', '.join(self.render(a, where) for a in args)}]"
        if isinstance(tp, type) and is_dataclass(tp) and tp in SAVED_NAMES:
            self.emit(tp)
            return SAVED_NAMES[tp]
        if isinstance(tp, type) and issubclass(tp, BaseModel) and tp.__module__.startswith("tokenrace.model."):
            self.need(tp.__module__, tp.__name__)
            return tp.__name__
        # A settings class new to the tree: name its saved form in SAVED_NAMES; any other type: say in
        # SAVED_FIELDS what manifest.json keeps it as.
        raise TypeError(f"{where}: SAVED_NAMES or SAVED_FIELDS (runs/settings.py) must say how files keep {tp!r}")

    def emit(self, cls: type) -> None:
        if cls in self.done:
            return
        self.done.add(cls)
        hints = typing.get_type_hints(cls)
        lines: list[str] = []
        for f in fields(cls):
            how = SAVED_FIELDS.get((cls, f.name), SavedField())
            if how.omit:
                continue
            where = f"{cls.__name__}.{f.name}"
            text = how.as_type or self.render(hints[f.name], where)
            if "JsonValue" in text:  # an annotation given as text in SAVED_FIELDS
                self.need("pydantic", "JsonValue")
            if text != "JsonValue" and not text.endswith("| None"):
                text += " | None"  # absent from older files
            if how.check is not None:
                self.annotated = True
                self.need("pydantic", "AfterValidator")
                self.need(how.check.__module__, how.check.__name__)
                text = f"Annotated[{text}, AfterValidator({how.check.__name__})]"
            lines.append(f"    {how.name or f.name}: {text} = None")
        doc = [f'    """{ROOT_DOC}"""', ""] if cls is BenchSettings else []
        self.classes.append("\n".join([f"class {SAVED_NAMES[cls]}(_Model):", *doc, *lines]))

    def source(self) -> str:
        stdlib = "from typing import Annotated\n\n" if self.annotated else ""
        third = f"from pydantic import {', '.join(sorted(self.imports['pydantic']))}\n\n"
        ours = "".join(
            f"from {module} import {', '.join(sorted(names))}\n"
            for module, names in sorted(self.imports.items())
            if module != "pydantic"
        )
        number = "\nNumber = float | int  # as the user gave it\n"
        body = "\n\n\n".join(self.classes)
        return f"from __future__ import annotations\n\n{stdlib}{third}{ours}{number}\n\n{body}\n"


def source() -> str:
    """The module's text: its docstring as it stands, then the generated code."""
    text = DEFAULT_PATH.read_text(encoding="utf-8")
    docstring = text[: text.index('"""', 3) + 3]
    writer = _Writer()
    writer.emit(BenchSettings)
    return f"{docstring}\n\n{writer.source()}"


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PATH
    path.write_text(source(), encoding="utf-8")
    print(path)


if __name__ == "__main__":
    main()
