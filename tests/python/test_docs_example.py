"""The RL loop in docs/python.md runs as written (on the stories260K folder)."""
import pathlib
import re

from conftest import STORIES_HF, require

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def test_docs_rl_loop_runs(capsys):
    text = DOC.read_text()
    code = re.search(r"```python\n(import refit, torch\n.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 14, "the README promises a dozen lines"
    exec(compile(code.replace('"stories260K/hf"', repr(str(require(STORIES_HF)))), str(DOC), "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("step 0: sampled on v1, now v2")
    assert printed[2].startswith("step 2: sampled on v3, now v4")
