from conftest import REPO


def test_ci_runs_exactly_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    cmd = 'pip install -e ".[dev]" && python -m pytest -n 2'
    assert cmd in readme and cmd in ci
