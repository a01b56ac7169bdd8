"""The MLflow side of ``flplat reproduce``: one experiment per paper, one parent run per table and scale, the
FINISHED runs by config hash (:class:`Store`). A finished run of an earlier flplat (its hash made before flplat
gained config keys) stands for a job when its logged params match (:func:`compatible`, on :func:`run_params`). A job
skipped for a reason (its config failed while its run was prepared, e.g. an infeasible partition: no run exists)
leaves the reason on the table's parent run as the tag ``flplat.reproduce.skipped.<config hash>``, so a later
``--render-only`` shows why the cell was not run (a reason is shown only while its job has no finished run).
A run logged before the partition metrics ``hellinger``, ``jsd``, ``emd`` became FedArtML's multi-client
definitions has its three values read back as ``*_to_global`` (what they were), never under the new names
(:func:`flplat.metrics.noniid.current_metrics`).

Every finished run read back keeps the code identity it recorded (:attr:`Store.codes`,
:mod:`flplat.tracking.provenance`); :meth:`Store.stale` says whether it comes from other code than its job's now
(see :mod:`flplat.studies.reproduce` for what the tables do with it). A finished run without the table's value says
why (:meth:`Store.no_value`: e.g. a clustered method whose clustering never started logs no τ)."""

from __future__ import annotations

import sys

from flplat.metrics.noniid import current_metrics
from flplat.studies.reproduction.grid import Job
from flplat.tracking.provenance import CodeIdentity

SKIP_TAG = "flplat.reproduce.skipped."
FAILED = "failed: "  # the reason of a job whose run ended with an error (e.g. diverged), as the tables show it
# the reason of a job whose run finished without the table's value: a clustered method that never formed clusters
# (no tau / ari logged), or any other metric the run did not log
NO_CLUSTERS = "finished, clustering never started: "
NO_VALUE = "finished without a value: "
# a Few / Medium / Many class accuracy (DA-PFL Table IV) of a run in which no client's class fell in that bucket
NO_BUCKET = {b: f"no {b.capitalize()} classes: " for b in ("few", "medium", "many")}
# the reason of a derived cell's seed without a mean: some of its parts have no value (reproduction.derived)
INCOMPLETE = "incomplete: "
CLUSTERING_METRICS = ("tau", "ari")
OTHER_CODE = "other code"  # a finished run made by other code than this command's (flplat.tracking.provenance)
UNKNOWN_CODE = "unknown code"  # one logged before runs recorded their code
# one imported from a run record that carried no config (:mod:`.importing`): matched to its job by table, cell,
# method, seed and scale; its code is unknown
NO_CONFIG = "unknown code, imported without its config"
NO_CONFIG_TAG = "flplat.import.no_config"

# Keys added with a default that changes what a run does (where the condition's params hold): a run made before the
# key existed ran with the value given here, so it stands for a new run only when the new run asks for that value.
LEGACY_VALUES: dict[str, tuple[str, dict[str, str]]] = {
    # Flux's adaptive DBSCAN noise guard: a run made before the key existed ran the knee alone, the paper's rule.
    # The guard was the default for a while (it is opt-in now), and runs of that time log
    # knee_guard=noise: by their logged value they stand for the "Flux + noise guard" row (same hash or compatible),
    # the earlier ones and those logging none for the "Flux" row (the default again). Flux-prior's K-means is
    # unaffected (INERT_KEYS)
    "algorithm.knee_guard": ("none", {"algorithm.clustering": "dbscan"}),
    # APFL's v- and alpha-steps mixed with w after the step in older versions (now before it, as its Algorithm 1)
    "algorithm.mix_with": ("after", {"algorithm.name": "apfl"}),
    # pFedMe's inner solve drew a fresh minibatch per step with the federation's optimizer in older versions (now K
    # steps on one minibatch with plain gradient steps, as its Algorithm 1 and the authors' code)
    "algorithm.inner_batch": ("fresh", {"algorithm.name": "pfedme"}),
    "algorithm.inner_optimizer": ("federation", {"algorithm.name": "pfedme"}),
}

# Keys that do not change what a run computes where the condition's params hold (of the new run): compared neither
# way, so a run that logged another value stands for the job. Flux-prior (K-means) never reads the DBSCAN knee guard,
# and its runs made while the guard was the default (logged noise) stand for today's (none).
INERT_KEYS: dict[str, dict[str, str]] = {
    "algorithm.knee_guard": {"algorithm.clustering": "kmeans"},
}


def _inert(key: str, params: dict[str, str]) -> bool:
    cond = INERT_KEYS.get(key)
    return cond is not None and all(params.get(k) == v for k, v in cond.items())


def _legacy(key: str, params: dict[str, str], default: str | None) -> str | None:
    """The value an earlier flplat ran ``key`` with, for a run of ``params``."""
    if key in LEGACY_VALUES:
        value, cond = LEGACY_VALUES[key]
        if all(params.get(k) == v for k, v in cond.items()):
            return value
    return default


def legacy_overrides(recorded: dict[str, str]) -> list[str]:
    """``key=value`` for each key of :data:`LEGACY_VALUES` that a run's recorded config (``recorded``: its params,
    dotted keys, string values) lacks while the key's condition holds: the value the earlier flplat that made the run
    ran with, so that a record of it is keyed as what it computed, not as today's default
    (:mod:`flplat.studies.reproduction.importing`)."""
    return [f"{k}={v}" for k, (v, cond) in LEGACY_VALUES.items()
            if k not in recorded and all(recorded.get(c) == w for c, w in cond.items())]


def run_params(cfg) -> dict[str, str]:
    """The config as the run logs it (MLflow params: dotted keys, string values), without what :func:`config_key`
    leaves out."""
    from flplat.config_io import flatten, loggable

    return {k: str(v)[:6000] for k, v in flatten(loggable(cfg)).items() if not _outside_key(k)}


def _outside_key(key: str) -> bool:
    return key.startswith(("tracking.", "algorithm_unused.", "data_unused.", "partition_unused.")) or \
        key in ("fabric.num_threads", "plugins")


def compatible(new: dict[str, str], old: dict[str, str], defaults: dict[str, str]) -> list[str] | None:
    """Whether a finished run with params ``old`` stands for a run of params ``new`` whose hash it lacks (it was
    made before flplat gained config keys): every key of ``old`` has the same value in ``new``, and the keys only
    ``new`` has hold their default values (``defaults``: the params of the default config of the same algorithm),
    or for a key of :data:`LEGACY_VALUES` (a default that changed behaviour) the value the earlier flplat ran with;
    keys of :data:`INERT_KEYS` whose condition holds are not compared. Returns the added keys, or None when the run
    does not stand for it (a key changed, was removed, or a new key is set away from its default)."""
    full = new
    new = {k: v for k, v in full.items() if not _outside_key(k) and not _inert(k, full)}
    old = {k: v for k, v in old.items() if not _outside_key(k) and not _inert(k, full)}
    if set(old) - set(new) or any(old[k] != new[k] for k in old):
        return None
    added = sorted(set(new) - set(old))
    if any(_legacy(k, new, defaults.get(k)) != new[k] for k in added):
        return None
    return added


class Store:
    """The MLflow side of a reproduction: the experiment, the parent run per table, finished runs by hash."""

    def __init__(self, experiment: str, store_dir: str):
        from mlflow.tracking import MlflowClient

        from flplat.tracking.store import reachable_uri, store_uris

        reachable_uri(None, store_dir)  # one short probe, before MLflow retries an unreachable server for minutes
        uri, artifacts = store_uris(None, store_dir)
        self.client = MlflowClient(tracking_uri=uri)
        # run id -> the code that made it (None: not recorded), for the runs read back and the runs made now
        self.codes: dict[str, CodeIdentity | None] = {}
        self.no_config: set[str] = set()  # the runs imported from records without a config (NO_CONFIG)
        self.replaced: dict[str, str] = {}  # config hash -> the run of other code a job runs again (--rerun-stale)
        exp = self.client.get_experiment_by_name(experiment)
        self.exp_id = exp.experiment_id if exp else self.client.create_experiment(experiment,
                                                                                 artifact_location=artifacts)

    def _search(self, filt: str) -> list:
        out, token = [], None
        while True:
            page = self.client.search_runs([self.exp_id], filt, max_results=1000, page_token=token)
            out += list(page)
            token = page.token
            if not token:
                return out

    def finished(self, paper: str) -> dict[str, tuple[str, dict[str, float]]]:
        """(run id, metrics) of the FINISHED runs of this paper's reproduction, by config hash (the newest wins)."""
        runs = self._search(f"attributes.status = 'FINISHED' and tags.`flplat.reproduce.paper` = '{paper}'")
        runs.sort(key=lambda r: r.info.start_time)
        for r in runs:
            self._read_code(r)
        return {r.data.tags["flplat.reproduce.key"]: (r.info.run_id, current_metrics(dict(r.data.metrics)))
                for r in runs if "flplat.reproduce.key" in r.data.tags}

    def _read_code(self, run, keep: bool = False) -> None:
        """Keep the code identity a run read back recorded (``keep``: unless one is known already) and whether it was
        imported without its config."""
        if not (keep and run.info.run_id in self.codes):
            self.codes[run.info.run_id] = CodeIdentity.from_tags(run.data.tags)
        if run.data.tags.get(NO_CONFIG_TAG) == "true":
            self.no_config.add(run.info.run_id)

    def stale(self, run_id: str, code: CodeIdentity | None) -> str | None:
        """Why run ``run_id`` does not come from ``code`` (the code of its job now): :data:`OTHER_CODE` (it recorded
        another code identity, or ``mixed``), :data:`UNKNOWN_CODE` (it recorded none), :data:`NO_CONFIG` (imported
        from a record without its config), or None (same code, or a run this command made)."""
        if run_id in self.no_config:
            return NO_CONFIG
        if run_id not in self.codes:
            return None
        have = self.codes[run_id]
        if have is None:
            return UNKNOWN_CODE
        return None if code is None or have.key == code.key else OTHER_CODE

    def match_older(self, paper: str, todo: list[Job], done: dict[str, tuple[str, dict[str, float]]],
                    rerun_stale: bool = False) -> list[Job]:
        """The jobs of ``todo`` that no finished run stands for. A FINISHED run of this paper whose hash no longer
        matches (made before flplat gained config keys) stands for a job when :func:`compatible` says so: it is
        re-tagged with the job's hash, added to ``done`` and reported in one line. With ``rerun_stale`` a run of
        other code (:meth:`stale`) stands for nothing: its job runs again."""
        if not todo:
            return todo
        from flplat.experiment import load_config

        # a run of the current flplat with the same params has the job's hash (it would be in ``done``): only runs
        # of an earlier flplat can match here
        older = self._search(f"attributes.status = 'FINISHED' and tags.`flplat.reproduce.paper` = '{paper}'")
        if not older:
            return todo
        defaults: dict[str, dict[str, str]] = {}
        left = []
        for j in todo:
            params = run_params(load_config(j.config, list(j.overrides)))
            name = params.get("algorithm.name", "")
            if name not in defaults:
                defaults[name] = run_params(load_config(None, [f"algorithm.name={name}"]))
            match = None
            for r in older:
                self._read_code(r, keep=True)
                if rerun_stale and self.stale(r.info.run_id, j.code):
                    continue
                if r.data.params.get("seed") == params.get("seed") and \
                        r.data.params.get("algorithm.name") == name:
                    added = compatible(params, r.data.params, defaults[name])
                    if added is not None:
                        match = (r, added)
                        break
            if match is None:
                left.append(j)
                continue
            r, added = match
            self.client.set_tag(r.info.run_id, "flplat.reproduce.key", j.key)
            older.remove(r)
            done[j.key] = (r.info.run_id, current_metrics(dict(r.data.metrics)))
            print(f"{j.table} {j.cell} {j.method} s{j.seed}: finished run {r.info.run_id} of an earlier flplat "
                  f"stands for it (new keys at their defaults: {', '.join(added) or 'none'})", file=sys.stderr)
        return left

    def parent(self, paper: str, table: str, scale: str, claim: bool = True) -> str:
        """The parent run of a table at a scale, RUNNING and owned by this process; with ``claim`` False (an import
        of records) an existing one is left as it is and a new one is ended FINISHED."""
        name = f"{paper}/{table}@{scale}"
        found = self._search(f"tags.`flplat.reproduce.parent` = '{name}'")
        from flplat.tracking.heartbeat import process_tags

        if found and not claim:
            return found[0].info.run_id
        if not claim:
            run_id = self.client.create_run(self.exp_id, run_name=name, tags={
                "flplat.kind": "reproduce", "flplat.reproduce.parent": name, "flplat.reproduce.paper": paper,
            }).info.run_id
            self.client.set_terminated(run_id, "FINISHED")
            return run_id
        if found:
            run_id = found[0].info.run_id
            self.client.update_run(run_id, status="RUNNING")
            for k, v in process_tags().items():  # this process owns it now
                self.client.set_tag(run_id, k, v)
            return run_id
        return self.client.create_run(self.exp_id, run_name=name, tags={
            "flplat.kind": "reproduce", "flplat.reproduce.parent": name, "flplat.reproduce.paper": paper,
            **process_tags()}).info.run_id

    def value(self, run_id: str | None, metrics: dict[str, float], metric: str) -> float | None:
        """A run's final ``metric``, with ``NAME@STEP`` the value of NAME logged at STEP, with ``NAME@sum`` the sum of
        NAME over the steps it was logged at (e.g. ``round_time_s@sum``: the run's time over its rounds); None: not
        there."""
        name, _, step = metric.partition("@")
        if not step:
            return metrics.get(name)
        if run_id is None:
            return None
        hist = {m.step: m.value for m in self.client.get_metric_history(run_id, name)}
        if step == "sum":
            return float(sum(hist.values())) if hist else None
        return hist.get(int(step))

    def tag(self, run_id: str, paper: str, job: Job) -> None:
        for k, v in (("paper", paper), ("key", job.key), ("table", job.table), ("cell", job.cell),
                     ("method", job.method), ("seed", str(job.seed)),
                     *((("member", job.member),) if job.member else ())):
            self.client.set_tag(run_id, f"flplat.reproduce.{k}", v)

    def skipped(self, parent: str) -> dict[str, str]:
        """The reasons recorded on ``parent`` for the jobs skipped so far, by config hash."""
        tags = self.client.get_run(parent).data.tags
        return {k[len(SKIP_TAG):]: v for k, v in tags.items() if k.startswith(SKIP_TAG)}

    def failed(self) -> dict[str, str]:
        """``FAILED`` + the recorded error of the newest FAILED run (it ended with an error, e.g. diverged) per config
        hash, so a table shows why a job has no value; a finished run of the same hash supersedes it."""
        runs = self._search("attributes.status = 'FAILED'")
        runs.sort(key=lambda r: r.info.start_time)
        return {r.data.tags["flplat.config_key"]: FAILED + r.data.tags.get("flplat.error", "no error recorded")
                for r in runs if "flplat.config_key" in r.data.tags}

    def no_value(self, run_id: str, metric: str) -> str:
        """Why finished run ``run_id`` has no ``metric``: :data:`NO_CLUSTERS` for τ and ARI (a clustered method whose
        clustering never started; with Flux's ``clustering_started`` and ``algorithm.start_round``, what they say)
        or :data:`NO_VALUE`, then what the run logged."""
        run = self.client.get_run(run_id)
        params, metrics = run.data.params, run.data.metrics
        name = metric.partition("@")[0]
        rounds = params.get("federation.rounds", "?")
        started = metrics.get("clustering_started")
        bucket = name.removeprefix("acc_").partition("_")[0] if name.startswith("acc_") else ""
        if bucket in NO_BUCKET:
            edges = params.get("metrics.class_bucket_edges", "[30.0, 80.0]")
            return (f"{NO_BUCKET[bucket]}the run finished after {rounds} rounds and no client's test classes fell in "
                    f"the {bucket.capitalize()} bucket by their training counts (metrics.class_bucket_edges={edges}: "
                    "Few < a <= Medium <= b < Many)")
        if name not in CLUSTERING_METRICS:
            at = metric.partition("@")[2]
            where = f" at step {at}" if at and at != "sum" else ""
            return f"{NO_VALUE}the run finished after {rounds} rounds without logging {name}{where}"
        why = [f"the run finished after {rounds} rounds without logging {name}"]
        if started == 0:
            why.append("clustering_started = 0 at its last round")
        start = params.get("algorithm.start_round")
        if start == "0":
            why.append("algorithm.start_round=0: the dynamic start rule did not fire within its rounds")
        elif start is not None and start.isdigit() and rounds.isdigit() and int(start) > int(rounds):
            why.append(f"algorithm.start_round={start} is after its last round")
        return NO_CLUSTERS + "; ".join(why)

    def skip(self, parent: str, key: str, reason: str) -> None:
        self.client.set_tag(parent, SKIP_TAG + key, reason[:5000])
