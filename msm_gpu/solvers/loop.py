"""The one iteration loop: stopping rule, callback, history, time limit, column retirement.

Every iterative method (MSM, the proximal-gradient baselines, the MSM phases of the
exact finish, proximal Newton) is an :class:`IterativeMethod`: it owns its iterate in its
own layout and knows how to take one step on the columns still active.
:func:`run_iterations` does the rest, the same way for all of them:

* a column stops (retires) when ``||x_{k+1} - x_k|| <= tol * max(||x_k||, floor_c)``,
  a relative rule (scale invariant: x and the floor scale together); ``floor_c`` is the
  caller's estimate of the column's scale (``||r_c|| / tr(A)``, see
  :mod:`msm_gpu._input.problem`), 1 when none is given.  Retired columns are no longer stepped
  (``tol = 0`` runs exactly ``max_iter`` iterations);
* a step norm, ``||x||`` or objective that is not finite stops the run at once: no
  column still running is converged (an indefinite A drives F to -inf and x to inf;
  data that overflow do the same);
* ``callback(info)`` after every iteration (True or StopIteration stops the run);
* the objective after every iteration in ``history`` when ``record_objective``;
* ``time_limit`` (seconds since ``start_time``) checked after every iteration;
* ``verbose``: a tqdm progress bar with the objective and the active columns;
* columns a method reports ``stopped`` (no decrease representable) retire unconverged.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from .._input.stats import finite_columns
from ..arrays import module_of, to_host
from ..result import IterationInfo


@dataclass
class StepReport:
    """What one step tells the loop, per active column (backend arrays).

    Attributes
    ----------
    step : (n_active,) array
        ``||x_{k+1} - x_k||`` of each active column (or the method's own optimality
        measure, compared with ``tol`` the same way).
    xnorm : (n_active,) array
        ``||x_k||`` of each active column (the scale of the stopping rule).
    stopped : (n_active,) host bool array, optional
        Columns the method cannot move any further (e.g. no decrease representable in
        floating point): they retire without being converged.
    """

    step: object
    xnorm: object
    stopped: np.ndarray | None = None


@dataclass
class LoopOutcome:
    """What :func:`run_iterations` returns (backend arrays stay on the backend).

    Attributes
    ----------
    x : (n, r) backend array
        The final iterate.
    fun_columns : (r,) backend float64 array
        F of every column at ``x``, computed directly at the end.
    fun : float
        ``sum(fun_columns)``.
    n_iter : int
    converged_columns : (r,) bool ndarray
    n_iter_columns : (r,) int64 ndarray
    message : str
    objective : ndarray
        F after 0, 1, ..., n_iter iterations (float64; empty without recording).
    timings : dict
        Seconds in "setup" (everything before the first step) and "iterations".
    info : dict
        The method's own details (:meth:`IterativeMethod.info`).
    diverged : bool
        The run stopped because the iterate or the objective stopped being finite.
    """

    x: object
    fun_columns: object
    fun: float
    n_iter: int
    converged_columns: np.ndarray
    n_iter_columns: np.ndarray
    message: str
    objective: np.ndarray
    timings: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    diverged: bool = False


#: Message of a run where every column left still running was stopped by the method.
STOPPED_MESSAGE = "stopped: no further decrease in floating point for every remaining column"
#: Message of a run ended by ``phase_done``.
PHASE_DONE_MESSAGE = "phase done"
#: Message of a run stopped by a non-finite step, iterate or objective.
DIVERGED_MESSAGE = (
    "stopped at iteration {k}: the iterate or the objective is no longer finite; "
    "A is not positive semidefinite (the objective is unbounded below) or the data "
    "overflow"
)


class IterativeMethod(ABC):
    """One method's iterations on 2-D backend arrays; columns are independent problems.

    ``active`` (host int array, increasing) lists the columns still being stepped;
    it shrinks only through :meth:`retire`.
    """

    active: np.ndarray

    @abstractmethod
    def start_objective(self, will_step: bool = False) -> None:
        """Compute F(X_0) per column, before the first step (only when recording).

        ``will_step``: the first :meth:`step` follows for sure; a method may then do that
        step's work now (e.g. MSM takes F(X_0) from its first sweep's products) as long as
        :meth:`step` reports it and nothing else can tell the difference."""

    @abstractmethod
    def step(self, record_objective: bool) -> StepReport:
        """One iteration on the active columns (and the objective update when recording)."""

    @abstractmethod
    def objective(self):
        """F of the whole current iterate, as tracked (sum over all columns): a float or a
        0-d backend array (left on the device: the loop reads it with its other flags)."""

    @abstractmethod
    def retire(self, done: np.ndarray) -> None:
        """Stop stepping the active columns where ``done`` (host bool, n_active) is True."""

    @abstractmethod
    def current_x(self):
        """The whole n x r iterate (a new backend array)."""

    def final_x(self):
        """The whole iterate once the iterations are over (may hand over the method's own
        array instead of a copy: no step follows)."""
        return self.current_x()

    @abstractmethod
    def final_objective(self, x):
        """F per column of ``x``, computed directly (backend float64 array)."""

    def info(self) -> dict:
        """The method's details for ``SolveResult.info``."""
        return {}

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Release what the method holds (thread settings, device buffers)."""


def _unchanged(x):
    return x


@dataclass(frozen=True)
class LoopSettings:
    """What :func:`run_iterations` is told: the stopping rule and what to report.

    Attributes
    ----------
    tol : float
        Relative step tolerance of the stopping rule (0: exactly ``max_iter`` iterations).
    max_iter : int
    time_limit : float or None
        Seconds since ``start_time`` after which the loop stops.
    record_objective : bool
        Keep F after every iteration in the outcome's ``objective``.
    start_time : float
        ``time.perf_counter()`` when the solve began (the time limit counts from it).
    callback : callable, optional
        ``callback(IterationInfo)`` after every iteration; True or StopIteration stops.
    to_user : callable
        Maps the method's iterate to the user's x (for the callback).
    x_floor : (n_cols,) host array, optional
        Floor of the stopping rule's scale per column (default 1).
    verbose : bool
        A tqdm progress bar.
    objective_to_user : callable, optional
        Maps the method's objective to the one the callback and the progress bar show.
    """

    tol: float
    max_iter: int
    time_limit: float | None
    record_objective: bool
    start_time: float
    callback: Callable | None = None
    to_user: Callable = _unchanged
    x_floor: np.ndarray | None = None
    verbose: bool = False
    objective_to_user: Callable | None = None

    def quiet(self, **changes) -> LoopSettings:
        """These settings for an inner run nobody watches: no callback, progress bar,
        time limit, history or scale floor, its clock started now; ``changes`` on top."""
        inner = {"time_limit": None, "record_objective": False, "callback": None}
        inner.update(verbose=False, to_user=_unchanged, x_floor=None)
        inner["start_time"] = time.perf_counter()
        return replace(self, **{**inner, **changes})


#: The message of a run a callback stopped (a finish may append to it).
STOPPED_BY_CALLBACK = "stopped by callback"


def run_iterations(
    method: IterativeMethod,
    *,
    n_cols,
    settings: LoopSettings,
    phase_done=None,
) -> LoopOutcome:
    """Iterate ``method`` until every column met ``settings.tol``, ``max_iter``, the time
    limit or the callback stops it, or a step is not finite.  Closes the method in every
    case.

    ``phase_done(method, n_iter)``, if given, is asked after every iteration whether a
    phase of a two-phase method is over (e.g. MSM has found the face; ``finish/run.py``):
    True ends the loop with the message "phase done".
    """
    tol, max_iter, time_limit = settings.tol, settings.max_iter, settings.time_limit
    record_objective, callback, start_time = (
        settings.record_objective,
        settings.callback,
        settings.start_time,
    )
    x_floor, verbose, to_user = settings.x_floor, settings.verbose, settings.to_user
    floor = np.ones(n_cols) if x_floor is None else np.asarray(x_floor, dtype=np.float64)
    user_fun = settings.objective_to_user or float
    bar = _progress_bar(max_iter) if verbose else None
    try:
        converged = np.zeros(n_cols, dtype=bool)
        n_iter_cols = np.zeros(n_cols, dtype=np.int64)
        history = []
        if record_objective:
            method.start_objective(will_step=max_iter > 0)
            history.append(method.objective())
        loop_start = time.perf_counter()

        message = f"reached max_iter = {max_iter}"
        diverged = False
        n_iter = 0
        # The per-column tests run where the iterate lives; only two flags reach the host
        # each iteration (and the done mask when some column is done): on a GPU a copy of
        # r step norms per iteration costs more than the sweep for short columns.
        floor_active = None
        n_stopped = 0
        while n_iter < max_iter:
            report = method.step(record_objective)
            n_iter += 1
            if record_objective:
                history.append(method.objective())
            if bar is not None:
                _advance(bar, history, record_objective, user_fun, len(method.active))
            mod = module_of(report.step)
            finite = mod.isfinite(report.step) & mod.isfinite(report.xnorm)
            if record_objective:
                finite = finite.all() & mod.isfinite(mod.asarray(history[-1]))
            checks = [~finite.all()]
            if tol > 0:
                if floor_active is None:
                    floor_active = mod.asarray(floor[method.active])
                done_dev = report.step <= tol * mod.maximum(report.xnorm, floor_active)
                checks.append(done_dev.any())
            # the one transfer of the iteration (NumPy: the flags are host values already)
            flags = checks if mod is np else to_host(mod.stack(checks))
            any_bad, any_done = bool(flags[0]), tol > 0 and bool(flags[-1])

            if any_bad:
                diverged = True
                message = DIVERGED_MESSAGE.format(k=n_iter)
                break

            if callback is not None:
                info = IterationInfo(
                    x=to_user(method.current_x()),
                    fun=user_fun(float(history[-1])) if record_objective else float("nan"),
                    n_iter=n_iter,
                    n_active=len(method.active),
                )
                if callback_stops(callback, info):
                    message = STOPPED_BY_CALLBACK
                    break

            stopped = report.stopped
            any_stopped = stopped is not None and bool(np.any(stopped))
            if any_done or any_stopped:
                done = np.zeros(len(method.active), dtype=bool)
                if any_done:
                    done = np.asarray(to_host(done_dev), dtype=bool)
                converged[method.active[done]] = True
                leaving = done | stopped if any_stopped else done
                n_stopped += int(np.sum(leaving & ~done))
                n_iter_cols[method.active[leaving]] = n_iter
                method.retire(leaving)
                floor_active = None
                if len(method.active) == 0:
                    if n_stopped:
                        message = STOPPED_MESSAGE
                    else:
                        message = f"converged: every column met tol = {tol:g}"
                    break
            if time_limit is not None and time.perf_counter() - start_time >= time_limit:
                message = f"reached time_limit = {time_limit:g} s"
                break
            if phase_done is not None and phase_done(method, n_iter):
                message = PHASE_DONE_MESSAGE
                break
        # the columns still stepped when the loop ended did every iteration (a column's
        # count is set when it retires)
        n_iter_cols[method.active] = n_iter
        if n_stopped and message != STOPPED_MESSAGE:
            message += f" ({n_stopped} column(s) stopped without decrease before tol)"

        x = method.final_x()
        loop_end = time.perf_counter()
        fun_cols = method.final_objective(x)
        # never converged with a non-finite x or F (e.g. F = -inf from an indefinite A)
        finite_cols = to_host(_finite_columns(x) & _isfinite(fun_cols))
        if not finite_cols.all():
            converged &= finite_cols
            if not diverged:
                diverged = True
                message = f"{message}; but " + DIVERGED_MESSAGE.format(k=n_iter)
        return LoopOutcome(
            x=x,
            fun_columns=fun_cols,
            fun=float(fun_cols.sum()),
            n_iter=n_iter,
            converged_columns=converged,
            n_iter_columns=n_iter_cols,
            message=message,
            objective=_host_history(history),
            timings={"setup": loop_start - start_time, "iterations": loop_end - loop_start},
            info=method.info(),
            diverged=diverged,
        )
    finally:
        if bar is not None:
            bar.close()
        method.close()


def _host_history(history):
    """The recorded objective values (backend scalars) as one float64 host array."""
    if not history:
        return np.zeros(0, dtype=np.float64)
    mod = module_of(history[-1])
    values = mod.stack([mod.asarray(h, dtype=mod.float64) for h in history])
    return np.asarray(to_host(values), dtype=np.float64)


def _finite_columns(x):
    host = finite_columns(x)  # NumPy: one compiled pass
    return host if host is not None else module_of(x).isfinite(x).all(axis=0)


def _isfinite(values):
    return module_of(values).isfinite(values)


def _progress_bar(max_iter):
    from tqdm.auto import tqdm

    return tqdm(total=max_iter, desc="MSM", unit="it")


def _advance(bar, history, record_objective, user_fun, n_active):
    postfix = {"active": n_active}
    if record_objective:
        postfix["objective"] = f"{user_fun(float(history[-1])):.8g}"
    bar.set_postfix(postfix, refresh=False)
    bar.update(1)


def callback_stops(callback, info) -> bool:
    """Call a user callback: True or ``StopIteration`` means stop."""
    try:
        return bool(callback(info))
    except StopIteration:
        return True
