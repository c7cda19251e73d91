"""Throwaway git clones of this repository, for the tools that read git (tools/gpu_run.py): a clone whose
main is the working tree (so main has the working tree's notebook versions), and a fresh clone of it for
one test to change."""
import shutil
import subprocess

from support.notebook_code import REPO


def git(folder, *args):
    """Run git in `folder` as a made-up user; its standard output."""
    command = ["git", "-C", str(folder), "-c", "user.name=test", "-c",
               "user.email=test@example.invalid", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def clone_of_the_working_tree(folder):
    """A clone of this repository's HEAD in `folder` with the working tree's tools, records and
    notebooks committed on top: a clean checkout whose main is that commit."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(folder)], check=True)
    for part in ("tools", "records", "notebooks"):  # what the tools read, as in the working tree
        shutil.copytree(REPO / part, folder / part, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "README.md", folder / "README.md")
    git(folder, "add", "-A")
    git(folder, "commit", "--quiet", "--allow-empty", "-m", "the working tree")
    git(folder, "update-ref", "refs/heads/main", "HEAD")
    return folder


def fresh_clone(clone, folder):
    """A fresh clone of `clone` in `folder`, its main the clone's main."""
    subprocess.run(["git", "clone", "--quiet", str(clone), str(folder)], check=True)
    git(folder, "update-ref", "refs/heads/main", "refs/remotes/origin/main")
    return folder
