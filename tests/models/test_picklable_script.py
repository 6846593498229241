"""check_picklable accepts a model class written in the script being run, refuses a REPL's."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCE = """
import torch
from graphdist.models import check_picklable

class ScriptNet(torch.nn.Module):
    def forward(self, x, blocks):
        return x

if __name__ == "__main__":
    check_picklable(ScriptNet())
    print("ok")
"""


def test_class_in_the_running_script_is_accepted(tmp_path):
    script = tmp_path / "train_my_model.py"
    script.write_text(SOURCE)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_class_typed_into_stdin_is_refused():
    done = subprocess.run([sys.executable, "-"], input=SOURCE, capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode != 0
    assert "ScriptNet is defined in __main__" in done.stderr
