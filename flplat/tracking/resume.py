"""Studies (sweep, tune, reproduce) continue their own interrupted runs: a run is found by a key tag, a child run by
its config hash (:func:`flplat.config_io.config_key`), a sweep / study parent by the hash of what defines the study.
An unfinished run is continued from its checkpoint, replaced, or -- while it still shows a live heartbeat
(:func:`flplat.tracking.heartbeat.is_stale`) -- left alone; every decision is one line on stderr. A sharded run
decides once, in rank 0, and every process follows (:func:`agree`).
"""

from __future__ import annotations

from collections.abc import Callable

from flplat.errors import ConfigError, RunFailed, first_line
from flplat.tracking.heartbeat import heartbeat_age, is_stale, process_tags, stale_after
from flplat.tracking.store import checkpoint_path, open_client, store_uris

CONFIG_KEY_TAG = "flplat.config_key"  # config_key(cfg) of the run (set when the run is created)
STUDY_KEY_TAG = "flplat.study_key"  # on a sweep / tune parent: what defines the study (its command)
SUPERSEDED_TAG = "flplat.superseded_by"  # an unfinished run another run replaced (resumed id, or why)
REPLACES_TAG = "flplat.replaces"  # on the new run: the unfinished runs it replaced (no checkpoint to resume)
# who runs it, when a scheduler retries the same task after its worker died (a Ray task's id, the same on every
# retry: flplat.studies.reproduction.execute): a retry takes over its own RUNNING run without waiting for staleness
OWNER_TAG = "flplat.owner"


def _say(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def runs_by_key(client, experiment_id: str, tag: str, key: str, parent_run_id: str | None = None) -> list:
    """Runs of the experiment whose ``tag`` is ``key`` (and nested under ``parent_run_id`` when given), newest
    first."""
    filt = f"tags.`{tag}` = '{key}'"
    if parent_run_id:
        filt += f" and tags.`mlflow.parentRunId` = '{parent_run_id}'"
    runs = client.search_runs([experiment_id], filt, max_results=10000)
    return sorted(runs, key=lambda r: r.info.start_time, reverse=True)


def interrupted(run, now: float | None = None) -> bool:
    """A run that stopped before its end and can be continued: KILLED (Ctrl-C, SIGTERM, ``runs --stale
    --mark``), FAILED other than by divergence (a store failure, a crash: resuming a diverged run would diverge
    again), or RUNNING without a live heartbeat (SIGKILL, power cut); not one already replaced by another run."""
    if SUPERSEDED_TAG in run.data.tags:
        return False
    status = run.info.status
    if status == "FAILED":
        return not run.data.tags.get("flplat.error", "").startswith("diverged")
    return status == "KILLED" or is_stale(run, now)


def alive_note(run, what: str, now: float | None = None) -> str:
    """One line for an unfinished run that still shows a heartbeat (another process, or a kill moments ago)."""
    age, limit = heartbeat_age(run, now), stale_after(run)
    return (f"flplat: {what} {run.info.run_id} is RUNNING with a heartbeat {age:.0f} s old (stale after {limit:.0f} "
            "s): left alone, a new one starts; after a kill, re-run once it is stale to resume it")


def reopen_parent(client, experiment_id: str, study_key: str, what: str) -> str | None:
    """The newest interrupted parent run of the study ``study_key`` (a sweep or tune command run before),
    RUNNING again (tag ``flplat.resumed`` counts the re-openings); None when there is none to re-open."""
    runs = [r for r in runs_by_key(client, experiment_id, STUDY_KEY_TAG, study_key)
            if "mlflow.parentRunId" not in r.data.tags]
    for r in runs:
        if interrupted(r):
            n = int(r.data.tags.get("flplat.resumed", "0")) + 1
            client.update_run(r.info.run_id, status="RUNNING")
            client.set_tag(r.info.run_id, "flplat.resumed", str(n))
            for k, v in process_tags().items():  # this process owns it now
                client.set_tag(r.info.run_id, k, v)
            _say(f"flplat: re-opening the {what} parent run {r.info.run_id} ({r.info.status}); its finished runs are "
                 "kept, its interrupted ones resumed")
            return r.info.run_id
        if r.info.status == "RUNNING":
            _say(alive_note(r, f"{what} parent run"))
    return None


def claim_unfinished(tracking_cfg, key: str, owner: str | None = None) -> tuple[dict | None, list[str]]:
    """What a study does with the earlier runs of one config (``key``: its config hash) in the experiment of
    ``tracking_cfg`` and under its ``parent_run_id`` (any parent when None):

    * the newest interrupted one (:func:`interrupted`) that has a checkpoint is continued: returns its checkpoint
      payload (:func:`flplat.engine.checkpoint.load`), to pass to :func:`flplat.experiment.run` as ``resume``;
    * the other unfinished ones (interrupted, or FAILED by divergence) are marked (tag ``flplat.superseded_by``:
      the resumed run, or "a new run ..."); stale RUNNING ones end KILLED (tag ``flplat.stale``); with no
      checkpoint to resume, returns their ids (the new run tags them as ``flplat.replaces``);
    * RUNNING runs with a live heartbeat are left alone (another process trains them, or a kill was moments ago),
      except those whose ``flplat.owner`` tag is ``owner``: an earlier attempt of this very task, whose worker died
      (a retried Ray task), which count as interrupted.

    Every decision is said in one line on stderr."""
    uri, _ = store_uris(tracking_cfg.uri, tracking_cfg.store_dir, getattr(tracking_cfg, "artifact_root", None))
    client = open_client(uri)
    exp = client.get_experiment_by_name(tracking_cfg.experiment)
    if exp is None:
        return None, []
    runs = runs_by_key(client, exp.experiment_id, CONFIG_KEY_TAG, key, tracking_cfg.parent_run_id)
    resume, resume_id, others = _pick_resume(tracking_cfg, runs, owner)
    if resume_id:
        _say(f"flplat: resuming run {resume_id} of this config after round {resume['round']} (its checkpoint)")
    for r in others:
        _supersede(client, r, resume_id, owner)
    return resume, ([] if resume_id else [r.info.run_id for r in others])


def _own_attempt(r, owner: str | None) -> bool:
    """An earlier attempt of this task (its worker died): interrupted, however fresh its heartbeat."""
    return bool(owner) and r.info.status == "RUNNING" and r.data.tags.get(OWNER_TAG) == owner


def _pick_resume(tracking_cfg, runs: list, owner: str | None) -> tuple[dict | None, str | None, list]:
    """(checkpoint payload, run id) of the newest interrupted run with a readable checkpoint (or None, None), and
    the other unfinished runs, to be superseded; live RUNNING runs and superseded or finished ones are left out."""
    from flplat.engine import checkpoint

    resume, resume_id, others = None, None, []
    for r in runs:
        if SUPERSEDED_TAG in r.data.tags or r.info.status not in ("KILLED", "FAILED", "RUNNING"):
            continue
        mine = _own_attempt(r, owner)
        if r.info.status == "RUNNING" and not is_stale(r) and not mine:
            _say(alive_note(r, "run"))
            continue
        if mine:
            _say(f"flplat: run {r.info.run_id} is an earlier attempt of this task ({owner}) whose worker died")
        path = checkpoint_path(tracking_cfg, r.info.run_id)
        # (not a diverged one: it would diverge again)
        if resume is None and (interrupted(r) or mine) and path.is_file():
            try:
                resume, resume_id = checkpoint.load(path), r.info.run_id
                continue
            except Exception as e:  # unreadable (a disk that filled up mid-write, another version)
                _say(f"flplat: checkpoint {path} of run {r.info.run_id} is unreadable ({type(e).__name__}: "
                     f"{str(e).strip()[:200]}); not resumed")
        others.append(r)
    return resume, resume_id, others


def _supersede(client, r, resume_id: str | None, owner: str | None) -> None:
    """Tag an unfinished run ``flplat.superseded_by`` the resumed run (or "a new run ..."), say why in one line, and
    end it KILLED (tag ``flplat.stale``) when it was left RUNNING."""
    why = resume_id or "a new run (no checkpoint to resume: restarted from round 0)"
    mine = _own_attempt(r, owner)
    if resume_id:
        _say(f"flplat: older interrupted run {r.info.run_id} of this config is tagged {SUPERSEDED_TAG}="
             f"{resume_id}")
    else:
        state = ("was left RUNNING" + ("" if mine else " (stale)") if r.info.status == "RUNNING"
                 else f"ended {r.info.status}")
        why_not = "diverged" if not (interrupted(r) or mine) else "without a checkpoint to resume"
        _say(f"flplat: run {r.info.run_id} of this config {state} {why_not}: a new run starts from round 0 (the "
             f"old one is tagged {SUPERSEDED_TAG})")
    client.set_tag(r.info.run_id, SUPERSEDED_TAG, why)
    if r.info.status == "RUNNING":
        client.set_tag(r.info.run_id, "flplat.stale", "true")
        client.set_terminated(r.info.run_id, "KILLED")


def agree(tracking_cfg, decide: Callable[[], tuple[dict | None, dict[str, str] | None]]
          ) -> tuple[dict | None, dict[str, str] | None]:
    """``decide()`` taken by rank 0 of the process group and followed by every process: rank 0 decides (looking the
    run up changes the store, so no other process may), broadcasts the id of the run to resume (or none) and the
    tags, and the other processes load that run's checkpoint themselves (one node: the same file; several nodes:
    ``tracking.checkpoint_dir`` must be a directory every node mounts). A process that cannot read it fails them
    all with one line; a failure of rank 0's decision ends the others too. Without a process group: ``decide()``."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return decide()
    rank = dist.get_rank()
    resume, tags, failed = None, None, None
    if rank == 0:
        try:
            resume, tags = decide()
        except BaseException as e:
            failed = e
    box = [(resume["meta"]["run_id"] if resume is not None else None, tags,
            f"{type(failed).__name__}: {first_line(failed)}" if failed is not None else None)]
    dist.broadcast_object_list(box, src=0)
    run_id, tags, why = box[0]
    if failed is not None:
        raise failed
    if why is not None:
        raise RunFailed(f"rank 0 could not look up the run to resume ({why})")
    if run_id is None:
        return None, tags
    problem = None
    if rank != 0:
        from flplat.engine import checkpoint

        path = checkpoint_path(tracking_cfg, run_id)
        try:
            resume = checkpoint.load(path)
        except Exception as e:
            problem = f"rank {rank} cannot read the checkpoint {path} of run {run_id} ({type(e).__name__}: " \
                      f"{first_line(e)})"
    problems = [None] * dist.get_world_size()
    dist.all_gather_object(problems, problem)
    bad = next((x for x in problems if x), None)
    if bad:
        raise ConfigError(f"tracking.checkpoint_dir: {bad}; allowed: a directory every process of a sharded run sees "
                          "at the same path (several nodes: a shared filesystem)")
    return resume, tags
