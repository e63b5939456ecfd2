//! A small persistent thread pool for splitting kernel calls across cores.
//!
//! Two ways to share out an index space `0..tasks`:
//!
//! * [`Pool::run`] hands out static contiguous chunks, one per thread; the
//!   calling thread is thread 0 and does the first chunk itself;
//! * [`Pool::run_chunks`] lets the threads (caller included) claim indices
//!   one at a time from a shared atomic counter (`fetch_add`), as llama.cpp
//!   does, until none are left. A thread slowed down by another process on
//!   its core then simply claims fewer chunks, instead of holding back the
//!   whole call with a fixed share. Once the caller finds every index
//!   claimed it withdraws the job, so a worker that has not taken it by then
//!   (parked, or waiting for a core) does not hold the call either: the
//!   caller waits only for the workers that did take it.
//!
//! * `Pool::run_detached` claims like `run_chunks`, but for a job whose
//!   workers own everything they touch (`Detached`): the caller waits for
//!   a worker only a bounded time. A worker that claimed an index and then
//!   lost its core to another process (for a whole scheduler slice,
//!   milliseconds, while a GEMV takes a tenth of one) would otherwise hold
//!   the call; here the caller, once every index is claimed, waits for such
//!   an index about two of its own claims' time and then runs it itself.
//!   The worker's late result goes to the job's own buffers and is dropped.
//!
//! A claimed call (`run_chunks`, `run_detached`) that gained nothing from
//! its workers, judged against the caller's own CPU time (the scheduler had
//! a worker take turns with the caller on one core while another process
//! held the other), makes the calls of the next few milliseconds use one
//! thread fewer (`Backoff`), unless it had to wake a parked worker first
//! (the wake-up, not another process, held it back); [`Pool::stats`]
//! counts all of it.
//!
//! A pool of `threads` has `threads - 1` worker threads. Workers park on a
//! condition variable between calls; nothing is spawned per call.
//!
//! # Safety argument
//!
//! Both take `f: &(dyn Fn(usize) + Sync)` that may borrow the caller's stack,
//! and publish it to the workers as a lifetime-erased raw pointer. That is
//! sound because neither returns (nor unwinds) while any worker may still
//! use it. `remaining` (in the state mutex) counts the workers the caller
//! must still wait for:
//!
//! * a worker takes the job only under the mutex, by copying it out of
//!   `State::job`; it calls `f` outside the lock, then decrements
//!   `remaining` under the mutex and never touches the pointer again (it
//!   goes back to waiting for a newer epoch);
//! * [`Pool::run`] publishes the job with `remaining = participating
//!   workers`, so the caller waits for every one of them, taken or not;
//! * [`Pool::run_chunks`] publishes it with `remaining = 0`, and a worker
//!   that takes it increments `remaining` in the same critical section, so
//!   `remaining` counts exactly the workers holding the job. Once the
//!   caller's own claim loop ends (every index is claimed), it withdraws the
//!   job (`State::job = None`) under the mutex, so that workers that have not
//!   taken it by then never will and need not be waited for;
//! * the caller executes its own share inside `catch_unwind`, then waits on
//!   the condition variable until `remaining == 0` and, in that same critical
//!   section, clears the job (so no worker can take it afterwards), and only
//!   then returns or resumes a panic. Worker tasks are also run inside
//!   `catch_unwind`, so a panicking task still decrements `remaining`. Under
//!   `run_chunks` each claimed index is run inside its own `catch_unwind`, so
//!   a panic never stops a thread's claim loop, and the caller's loop ends
//!   only when every index is claimed;
//! * when the caller sees `remaining == 0` after its own claim loop, every
//!   index has run:
//!   an index is claimed either by the caller, or by a worker that took the
//!   job, which decrements `remaining` only after its claim loop;
//! * the claim counter lives in the pool's shared state, not on the caller's
//!   stack, and is reset under the mutex before a job is published. A worker
//!   touches it only between taking a job and its `remaining` decrement, so
//!   no claim of one job can reach into the next, which the caller publishes
//!   only after `remaining == 0`. `fetch_add` is one atomic read-modify-write,
//!   so each index below `tasks` goes to exactly one thread; the counter
//!   stops at most `threads` past `tasks` (each thread overshoots once before
//!   it stops), and `run_chunks` refuses index spaces where that could wrap;
//! * no user code runs while the state mutex is held, so the mutex cannot be
//!   poisoned by a task; poisoning is nevertheless tolerated (`into_inner`),
//!   so waiting can never be cut short by a panic elsewhere;
//! * concurrent calls on one pool (it is `Sync`) are serialized by a second
//!   mutex, and a call nested inside a task (same or worker thread) executes
//!   inline instead of waiting for itself;
//! * `f` is `Sync`, so calling it from several threads at once is allowed, and
//!   the mutex hand-offs order everything the tasks wrote before the call
//!   returns.
//!
//! `Pool::run_detached` needs none of the above: the workers' closure is
//! `'static` and shared through an `Arc` that each worker clones under the
//! mutex, so the job lives as long as its last worker. It has its own claim
//! counter (a late worker can never claim an index of a later job), and a
//! worker publishes index `i` as done with a release store after its
//! results are written; the caller reads them only after an acquire load
//! sees that flag. The caller's own closure never leaves the caller's
//! thread.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long a worker (or the caller) spins on the atomic hints before parking
/// on the condvar: waking a parked thread costs tens of microseconds (more in
/// a VM), as much as a whole small GEMV, while back-to-back calls are the
/// common case in inference.
const SPIN: Duration = Duration::from_micros(200);
use std::thread::JoinHandle;

type Task = dyn Fn(usize) + Sync;
type Payload = Box<dyn Any + Send + 'static>;

/// How a job's index space is shared out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// One contiguous chunk per participating thread ([`chunk`]).
    Static,
    /// Indices claimed one at a time from `Shared::next`.
    Claim,
}

/// A job whose workers own what they read and write (see
/// [`Pool::run_detached`]): once every index is claimed the caller need not
/// wait for them.
pub(crate) struct Detached {
    /// Runs index `i` on a worker, into buffers the closure owns.
    work: Box<dyn Fn(usize) + Send + Sync>,
    tasks: usize,
    /// The next unclaimed index (this job's own counter).
    next: AtomicUsize,
    /// Set, with release ordering, once a worker has run index `i`.
    done: Box<[AtomicBool]>,
    /// Threads taking part (caller included); workers with id >= this idle.
    active: usize,
}

/// What a job published to the workers is.
#[derive(Clone)]
enum Published {
    Borrowed(Job),
    Detached(Arc<Detached>),
}

/// A published job: the erased closure and how the index space is split.
#[derive(Clone, Copy)]
struct Job {
    f: *const Task,
    tasks: usize,
    /// Threads taking part (caller included); workers with id >= this idle.
    active: usize,
    split: Split,
}

// SAFETY: the pointee is `Sync`, so sharing the pointer with other threads is
// fine; its lifetime is guaranteed by `Pool::run` (see the module docs).
unsafe impl Send for Job {}

struct State {
    epoch: u64,
    /// The published job, until the caller withdraws it.
    job: Option<Published>,
    /// Workers the caller must still wait for (see the module docs).
    remaining: usize,
    panic: Option<Payload>,
    shutdown: bool,
    /// Which workers (by id) wait on `Shared::work` and have not been
    /// notified since: a job published now has to wake them first.
    parked: Vec<bool>,
}

struct Shared {
    state: Mutex<State>,
    /// Workers wait here for a new epoch or shutdown.
    work: Condvar,
    /// The caller waits here for `remaining == 0`.
    done: Condvar,
    /// Mirrors of `State::epoch` and `State::remaining`, written under the
    /// lock, read without it only to decide when to stop spinning; every
    /// decision is then re-checked under the lock.
    epoch_hint: AtomicU64,
    remaining_hint: AtomicUsize,
    /// The next unclaimed index of a [`Split::Claim`] job (see the module
    /// docs); on its own cache line, away from the hints idle threads spin on.
    next: CachePadded<AtomicUsize>,
    /// Tests only: how long a worker waits, the lock released, before taking
    /// a new job, as if it were parked or waiting for a core.
    #[cfg(test)]
    take_delay: Duration,
    /// Tests only: how long a worker sleeps after claiming its first index
    /// of a detached job, as if it lost its core right then.
    #[cfg(test)]
    claim_delay: Duration,
}

/// Keeps a hot atomic off its neighbours' cache line (128 bytes: adjacent-line
/// prefetch pairs lines on x86, and some Arm cores have 128-byte lines).
#[repr(align(128))]
struct CachePadded<T>(T);

/// How many threads the next claimed jobs use. A claimed call measures
/// what its workers gained it: the caller's CPU time per index it ran, times
/// the indices, is what the call would have taken on the caller alone, and
/// the wall time is what it took. Where that gain is under [`MIN_GAIN`]
/// (the scheduler put a worker on the caller's core while another process
/// holds the other, so the two take turns; or a worker lost its core
/// holding a claim) the calls of the next 2, 4, 8, .. times that call's
/// wall time, up to [`MAX_WAIT`], run with one thread fewer; then the full
/// count is tried again. So with a core taken calls run at the speed of the
/// threads that have one, and a freed core is used again within
/// [`MAX_WAIT`]. The wait is in time, not calls: a long call (a GEMM)
/// tries again after a few calls, a short one (a GEMV) after dozens, so
/// the calls that try cost about the same share of the time either way.
#[derive(Debug, Default)]
struct Backoff {
    /// Threads left out of the calls that start before `until`.
    dropped: usize,
    until: Option<Instant>,
    /// Consecutive calls that gained nothing from a worker.
    streak: u32,
}

/// The longest a pool runs with fewer threads before trying all again.
const MAX_WAIT: Duration = Duration::from_millis(20);

/// The longest a claimed call's caller may wait for a woken worker and
/// still count the wait as the wake-up's (see [`Pool::judge`]): above the
/// tens of microseconds a VM takes to wake a thread, below the
/// milliseconds of a scheduler slice that a worker which lost its core
/// keeps the caller waiting.
const WAKE_WAIT: Duration = Duration::from_micros(500);

/// The least speedup over the caller alone for which a claimed call keeps
/// all its threads (a little above 1, so that the noise of the estimate
/// does not decide a call that ran at one thread's speed).
const MIN_GAIN: f64 = 1.05;

impl Backoff {
    /// Threads a claimed job of `threads` starting at `now` may use.
    fn threads(&mut self, threads: usize, now: Instant) -> usize {
        match self.until {
            Some(t) if now < t => threads.saturating_sub(self.dropped).max(1),
            _ => {
                self.until = None;
                threads
            }
        }
    }

    /// Records how a job allowed `active` threads that ended at `now` after
    /// `wall` went.
    fn record(
        &mut self,
        threads: usize,
        active: usize,
        gained_nothing: bool,
        wall: Duration,
        now: Instant,
    ) {
        if !gained_nothing {
            self.streak = 0;
            return;
        }
        self.streak = (self.streak + 1).min(16);
        self.until = Some(now + (wall * (1 << self.streak)).min(MAX_WAIT));
        self.dropped = threads - active + 1;
    }
}

/// Counters of a pool's claimed jobs ([`Pool::stats`]).
#[derive(Debug, Default)]
struct Counts {
    calls: AtomicU64,
    reduced: AtomicU64,
    no_gain: AtomicU64,
    rerun: AtomicU64,
    woke: AtomicU64,
}

/// What a pool's claimed jobs ([`Pool::run_chunks`] and the int8 kernels'
/// detached calls) met so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Calls split over the pool (not those too small to split).
    pub calls: u64,
    /// Calls run with fewer threads than the pool has, after earlier calls
    /// gained nothing from a worker.
    pub reduced: u64,
    /// Calls split over two or more threads that ran no faster than the
    /// caller alone would have (by its CPU time per index).
    pub no_gain: u64,
    /// Indices a worker claimed but the caller ran again (the worker took
    /// too long: it had lost its core).
    pub rerun: u64,
    /// Calls among `no_gain` that had to wake a parked worker first: the
    /// wake-up held them back, so they do not reduce the threads.
    pub woke: u64,
}

/// The CPU time this thread has used, where the OS says (time it waited
/// for a core does not count).
fn thread_cpu_time() -> Option<Duration> {
    #[cfg(thread_cpu_clock)]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes one timespec, which `t` is.
        let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
        ok.then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
    }
    // No per-thread clock here (see build.rs): the pool never reduces.
    #[cfg(not(thread_cpu_clock))]
    {
        None
    }
}

/// Spins until `cond` or [`SPIN`] has passed, yielding the core on every
/// turn: a spinning worker that the scheduler put on the caller's core
/// would otherwise keep the caller off it for the whole spin.
fn spin_until(cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() && start.elapsed() < SPIN {
        std::thread::yield_now();
    }
}

impl State {
    /// Whether a worker that takes part in a job of `active` threads (ids
    /// `1..active`) is parked, so that publishing the job has to wake it;
    /// then marks every worker not parked, since the caller notifies them
    /// all next (a woken worker that waits for its core must not count as
    /// parked again at the next call).
    fn wake_all(&mut self, active: usize) -> bool {
        let woke = self.parked.iter().take(active).skip(1).any(|&p| p);
        self.parked.fill(false);
        woke
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

thread_local! {
    /// Set while this thread runs pool tasks (as caller or worker), so a
    /// nested `run` executes inline instead of deadlocking.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
    /// Set while this thread runs its share of a job split over several
    /// threads (a worker, or a caller whose call woke workers), not while
    /// a call runs inline: a one-off parallel job started from here would
    /// compete with those threads for the cores ([`side_threads`]).
    static SHARING: Cell<bool> = const { Cell::new(false) };
}

#[cfg(test)]
thread_local! {
    /// Tests only: the `take_delay` of the pools this thread creates.
    static TAKE_DELAY: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    /// Tests only: the `claim_delay` of the pools this thread creates.
    pub(crate) static CLAIM_DELAY: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Sets a thread-local flag (`IN_POOL`, `SHARING`) for a scope and restores
/// it on exit, unwinding included.
struct FlagGuard {
    flag: &'static std::thread::LocalKey<Cell<bool>>,
    prev: bool,
}

impl FlagGuard {
    fn enter(flag: &'static std::thread::LocalKey<Cell<bool>>) -> FlagGuard {
        let prev = flag.with(|c| c.replace(true));
        FlagGuard { flag, prev }
    }
}

impl Drop for FlagGuard {
    fn drop(&mut self) {
        let prev = self.prev;
        self.flag.with(|c| c.set(prev));
    }
}

/// Task range `[start, end)` of thread `t` when `tasks` are split over `active` threads.
fn chunk(tasks: usize, active: usize, t: usize) -> (usize, usize) {
    let at = |t: usize| (t as u128 * tasks as u128 / active as u128) as usize;
    (at(t), at(t + 1))
}

/// Runs thread `t`'s share of a job of `tasks` indices over `active` threads:
/// its static chunk, where a panic ends the chunk; or claims from `next`
/// until every index is claimed, each run inside its own `catch_unwind`, so
/// a panic never ends the loop (the module's safety argument needs that).
/// Returns the first panic.
fn share(
    f: &(dyn Fn(usize) + Sync + '_),
    split: Split,
    tasks: usize,
    active: usize,
    t: usize,
    next: &AtomicUsize,
) -> Result<(), Payload> {
    match split {
        Split::Static => {
            let (start, end) = chunk(tasks, active, t);
            catch_unwind(AssertUnwindSafe(|| (start..end).for_each(f)))
        }
        Split::Claim => {
            let mut first = Ok(());
            loop {
                // Relaxed is enough: the read-modify-write alone makes claims
                // unique, and the state mutex orders the tasks' writes.
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= tasks {
                    break first;
                }
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
                    if first.is_ok() {
                        first = Err(p);
                    }
                }
            }
        }
    }
}

/// A persistent pool of `threads - 1` workers plus the calling thread.
pub struct Pool {
    threads: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes `run` calls from different threads, and holds how many
    /// threads the next claimed jobs use.
    run_lock: Mutex<Backoff>,
    /// Counters of claimed jobs, for [`Pool::stats`].
    counts: Counts,
    /// A scratch output for [`crate::panels::over_panels_owned`], kept
    /// between calls so its pages are not faulted in again each time (see
    /// [`ScratchLease`]).
    scratch: Arc<Mutex<Vec<f32>>>,
}

/// A scratch buffer lent by a [`Pool`]. It goes back to the pool when its
/// last holder drops it (a late worker's job included), so a buffer is never
/// lent again while anyone may still write into it.
pub(crate) struct ScratchLease {
    buf: Vec<f32>,
    home: Arc<Mutex<Vec<f32>>>,
}

impl ScratchLease {
    /// The buffer's start, for writes by whoever holds the lease.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut f32 {
        self.buf.as_mut_ptr()
    }
}

impl Drop for ScratchLease {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.buf);
        let mut kept = self.home.lock().unwrap_or_else(|e| e.into_inner());
        if v.capacity() > kept.capacity() {
            *kept = v;
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads)
            .finish()
    }
}

impl Pool {
    /// A pool running tasks on `threads` threads, the caller included
    /// (`threads - 1` workers are spawned; 0 is treated as 1). If the OS
    /// refuses to spawn a worker the pool keeps the ones it got and says so
    /// on stderr.
    pub fn new(threads: usize) -> Pool {
        let wanted = threads.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                epoch: 0,
                job: None,
                remaining: 0,
                panic: None,
                shutdown: false,
                parked: vec![false; wanted],
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            epoch_hint: AtomicU64::new(0),
            remaining_hint: AtomicUsize::new(0),
            next: CachePadded(AtomicUsize::new(0)),
            #[cfg(test)]
            take_delay: TAKE_DELAY.with(|d| d.get()),
            #[cfg(test)]
            claim_delay: CLAIM_DELAY.with(|d| d.get()),
        });
        let mut workers = Vec::with_capacity(wanted - 1);
        for id in 1..wanted {
            let sh = Arc::clone(&shared);
            match std::thread::Builder::new()
                .name(format!("kgen-pool-{id}"))
                .spawn(move || worker(sh, id))
            {
                Ok(h) => workers.push(h),
                Err(e) => {
                    eprintln!("kgen: could not spawn pool thread {id} of {wanted} ({e}); using {id} threads");
                    break;
                }
            }
        }
        Pool {
            threads: workers.len() + 1,
            shared,
            workers,
            run_lock: Mutex::new(Backoff::default()),
            counts: Counts::default(),
            scratch: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A buffer of `len` values (contents unspecified): the pool's kept one
    /// if it is back, else a new one.
    pub(crate) fn take_scratch(&self, len: usize) -> ScratchLease {
        let mut buf = std::mem::take(&mut *self.scratch.lock().unwrap_or_else(|e| e.into_inner()));
        buf.resize(len, 0.0);
        ScratchLease {
            buf,
            home: Arc::clone(&self.scratch),
        }
    }

    /// Threads that run tasks, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Calls `f(i)` once for every `i` in `0..tasks`, split in contiguous
    /// chunks over the pool's threads (the caller does the first chunk), and
    /// returns when all calls are done. If a task panics, the rest of its
    /// thread's chunk is skipped, the other chunks still finish, and the first
    /// panic is then resumed in the caller.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        self.dispatch(tasks, f, Split::Static);
    }

    /// Calls `f(i)` once for every `i` in `0..chunks` and returns when all
    /// calls are done. The pool's threads, the caller included, claim the
    /// indices in increasing order from a shared atomic counter until none
    /// are left, so a thread that gets less CPU time (another process on its
    /// core) takes fewer chunks; size the chunks so that there are several
    /// per thread. Which thread runs which index is not deterministic.
    ///
    /// The call returns as soon as every index has run: once all are
    /// claimed, a worker that has not joined in yet (parked, or waiting for
    /// its core) is no longer waited for.
    ///
    /// If a task panics, every other index still runs, and the first panic
    /// is then resumed in the caller. Nested in a task of this or another
    /// pool, the calls run inline, in order.
    ///
    /// # Panics
    ///
    /// If `chunks` is above `usize::MAX / 2` (the claim counter must not
    /// wrap).
    pub fn run_chunks(&self, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
        assert!(
            chunks <= usize::MAX / 2,
            "run_chunks: {chunks} chunks would let the claim counter wrap"
        );
        self.dispatch(chunks, f, Split::Claim);
    }

    /// Gets every `i` in `0..chunks` done, claimed as in [`Pool::run_chunks`]:
    /// the calling thread runs `mine(i)` for the indices it claims, a worker
    /// runs `work(i)` for the ones it claims, and the caller then calls
    /// `adopt(i)` for each index whose `work(i)` finished in time, or runs
    /// `mine(i)` itself for one that did not. `work` must own everything it
    /// reads and write only into buffers it owns; `adopt(i)` takes index
    /// `i`'s results from there (after `work(i)` returned: the flag that
    /// says so is read with acquire ordering). `mine` writes its results in
    /// place.
    ///
    /// Once every index is claimed, an index a worker still holds is waited
    /// for about twice the caller's own time per index (at least 20 µs;
    /// if the caller claimed none, twice the time since the job started).
    /// Then the caller runs `mine(i)` and the worker's result, whenever it
    /// comes, is never adopted: `work(i)` may run, in part or whole, after
    /// this returns. So a worker that loses its core to another process
    /// does not hold the call. A late worker keeps `work` (and what it
    /// owns) alive until it is done. Nested in a pool task, everything runs
    /// inline through `mine`.
    ///
    /// A panic in `mine` is resumed in the caller after the other indices
    /// ran. A panic in `work(i)` is dropped, and the caller runs `mine(i)`
    /// once the wait above has passed.
    pub(crate) fn run_detached(
        &self,
        chunks: usize,
        work: Box<dyn Fn(usize) + Send + Sync>,
        mine: &dyn Fn(usize),
        adopt: &dyn Fn(usize),
    ) {
        let inline = || {
            let _g = FlagGuard::enter(&IN_POOL);
            (0..chunks).for_each(mine);
        };
        if self.threads.min(chunks) <= 1 || IN_POOL.with(|c| c.get()) {
            return inline();
        }
        let mut backoff = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let start = Instant::now();
        let allowed = self.admit(&mut backoff, start);
        let active = allowed.min(chunks);
        if active <= 1 {
            return inline();
        }
        let job = Arc::new(Detached {
            work,
            tasks: chunks,
            next: AtomicUsize::new(0),
            done: (0..chunks).map(|_| AtomicBool::new(false)).collect(),
            active,
        });
        let woke = {
            let mut st = self.shared.lock();
            st.epoch = st.epoch.wrapping_add(1);
            st.job = Some(Published::Detached(Arc::clone(&job)));
            self.shared.epoch_hint.store(st.epoch, Ordering::Release);
            st.wake_all(active)
        };
        self.shared.work.notify_all();

        let (_g, _s) = (FlagGuard::enter(&IN_POOL), FlagGuard::enter(&SHARING));
        let mut ran = vec![false; chunks];
        let mut panic: Option<Payload> = None;
        let run_mine = |i: usize, panic: &mut Option<Payload>| {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| mine(i))) {
                panic.get_or_insert(p);
            }
        };
        let mut own = 0u32;
        let cpu_start = thread_cpu_time();
        loop {
            let i = job.next.fetch_add(1, Ordering::Relaxed);
            if i >= chunks {
                break;
            }
            run_mine(i, &mut panic);
            ran[i] = true;
            own += 1;
        }
        let own_cpu = cpu_start
            .zip(thread_cpu_time())
            .map(|(a, b)| b.saturating_sub(a));
        // Every index is claimed: later workers have nothing to take.
        self.shared.lock().job = None;
        let mut rerun = 0;
        // A worker running normally finishes the index it holds within about
        // one index's time; twice that, and it has lost its core. With no
        // claim of its own, the caller was away while the workers took them
        // all: the time since the start bounds one index's time.
        let patience = (start.elapsed() * 2 / own.max(1)).max(Duration::from_micros(20));
        for (i, _) in ran.iter().enumerate().filter(|(_, &ran)| !ran) {
            let since = Instant::now();
            loop {
                if job.done[i].load(Ordering::Acquire) {
                    adopt(i);
                    break;
                }
                if since.elapsed() > patience {
                    run_mine(i, &mut panic);
                    rerun += 1;
                    break;
                }
                // The worker may be waiting for this very core.
                std::thread::yield_now();
            }
        }
        self.counts.rerun.fetch_add(rerun, Ordering::Relaxed);
        // Waking a worker held the call back only where no index had to be
        // run again: a worker that claimed one and stalled is judged as
        // usual.
        let woke = woke && rerun == 0;
        self.judge(
            &mut backoff,
            allowed,
            chunks,
            own as usize,
            own_cpu,
            start,
            woke,
        );
        drop(backoff);
        if let Some(p) = panic {
            resume_unwind(p);
        }
    }

    /// The threads a claimed call may use now ([`Backoff::threads`]),
    /// counted in [`Pool::stats`].
    fn admit(&self, backoff: &mut Backoff, now: Instant) -> usize {
        let allowed = backoff.threads(self.threads, now);
        self.counts.calls.fetch_add(1, Ordering::Relaxed);
        if allowed < self.threads {
            self.counts.reduced.fetch_add(1, Ordering::Relaxed);
        }
        allowed
    }

    /// Records in `backoff` whether a claimed job of `chunks` indices
    /// allowed `allowed` threads (fewer if it had fewer indices), started at
    /// `start`, gained anything from its workers: the caller alone would
    /// have taken its CPU time per index (`own_cpu` over its `own` indices;
    /// time it waited for its core excluded) for every index. A caller that
    /// claimed none counts as no gain too: most often a worker woken onto
    /// its core took it from the start, and the two never ran at once (on
    /// an idle machine a spinning worker may also have finished a tiny job
    /// before the caller began, which runs as fast alone).
    ///
    /// A call that had to wake a parked worker, where no worker then held
    /// the caller (no index run again, no wait past [`WAKE_WAIT`]), is
    /// `woke`: if it gained nothing, that is counted but changes nothing,
    /// since the wake-up (tens of microseconds, a whole GEMV) held it back,
    /// not another process; that includes a caller that claimed none
    /// because the woken worker landed on its core. Otherwise a quiet
    /// machine locks itself in: a reduced call leaves the unused worker
    /// parked, so the next call with all threads has to wake it, gains
    /// nothing again, and backs off for longer. A worker that really lost
    /// its core is not parked at the next call (it is spinning, or
    /// runnable), and that call is judged.
    #[allow(clippy::too_many_arguments)]
    fn judge(
        &self,
        backoff: &mut Backoff,
        allowed: usize,
        chunks: usize,
        own: usize,
        own_cpu: Option<Duration>,
        start: Instant,
        woke: bool,
    ) {
        let now = Instant::now();
        let wall = now - start;
        let alone = own_cpu
            .filter(|_| own > 0)
            .map(|c| c.as_secs_f64() * chunks as f64 / own as f64);
        let no_gain = own == 0 || alone.is_some_and(|t| t < MIN_GAIN * wall.as_secs_f64());
        self.counts
            .no_gain
            .fetch_add(u64::from(no_gain), Ordering::Relaxed);
        if no_gain && woke {
            self.counts.woke.fetch_add(1, Ordering::Relaxed);
            return;
        }
        backoff.record(self.threads, allowed, no_gain, wall, now);
    }

    /// What this pool's claimed jobs met so far: how many were split, how
    /// many of those gained too little from the workers (and of those, how
    /// many only because a parked worker had to be woken), how many then
    /// ran on fewer threads, and how many claims the caller ran again. Benches
    /// print it next to their timings.
    pub fn stats(&self) -> PoolStats {
        let c = &self.counts;
        PoolStats {
            calls: c.calls.load(Ordering::Relaxed),
            reduced: c.reduced.load(Ordering::Relaxed),
            no_gain: c.no_gain.load(Ordering::Relaxed),
            rerun: c.rerun.load(Ordering::Relaxed),
            woke: c.woke.load(Ordering::Relaxed),
        }
    }

    fn dispatch(&self, tasks: usize, f: &(dyn Fn(usize) + Sync), split: Split) {
        let inline = || {
            let _g = FlagGuard::enter(&IN_POOL);
            if let Err(p) = share(f, split, tasks, 1, 0, &AtomicUsize::new(0)) {
                resume_unwind(p);
            }
        };
        let active = self.threads.min(tasks);
        if active <= 1 || IN_POOL.with(|c| c.get()) {
            return inline();
        }
        let mut backoff = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let start = Instant::now();
        let allowed = match split {
            // Static shares are fixed; claims are judged as detached jobs are.
            Split::Static => active,
            Split::Claim => self.admit(&mut backoff, start),
        };
        let active = allowed.min(tasks);
        if active <= 1 {
            return inline();
        }
        // SAFETY: only the lifetime bound of the trait object is erased (same
        // fat-pointer layout). The pointer is dereferenced by workers only
        // between taking the job below and their `remaining` decrement, and
        // this function waits until no worker that took it is left (see the
        // module docs) before returning or unwinding.
        let ptr: *const Task =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const Task>(f) };
        let job = Job {
            f: ptr,
            tasks,
            active,
            split,
        };
        let woke = {
            let mut st = self.shared.lock();
            // No participant of the previous job is left (it ended with
            // `remaining == 0`), so nobody can claim from this reset.
            self.shared.next.0.store(0, Ordering::Relaxed);
            st.epoch = st.epoch.wrapping_add(1);
            st.job = Some(Published::Borrowed(job));
            // Static shares are owed by every participating worker; claims
            // only by the workers that take the job (counted as they do).
            st.remaining = match split {
                Split::Static => active - 1,
                Split::Claim => 0,
            };
            st.panic = None;
            self.shared
                .remaining_hint
                .store(st.remaining, Ordering::Release);
            self.shared.epoch_hint.store(st.epoch, Ordering::Release);
            st.wake_all(active)
        };
        self.shared.work.notify_all();

        let own = AtomicUsize::new(0);
        let cpu_start = thread_cpu_time();
        let own_start = Instant::now();
        let mine = {
            let (_g, _s) = (FlagGuard::enter(&IN_POOL), FlagGuard::enter(&SHARING));
            let counted = |i: usize| {
                own.fetch_add(1, Ordering::Relaxed);
                f(i)
            };
            share(&counted, split, tasks, active, 0, &self.shared.next.0)
        };
        let own_cpu = cpu_start
            .zip(thread_cpu_time())
            .map(|(a, b)| b.saturating_sub(a));
        let own_done = Instant::now();
        if split == Split::Claim {
            // Every index is claimed: withdraw the job, so that only the
            // workers that took it are waited for.
            let mut st = self.shared.lock();
            st.job = None;
            self.shared
                .remaining_hint
                .store(st.remaining, Ordering::Release);
        }

        spin_until(|| self.shared.remaining_hint.load(Ordering::Acquire) == 0);
        let worker_panic = {
            let mut st = self.shared.lock();
            while st.remaining > 0 {
                st = self.shared.done.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.job = None;
            st.panic.take()
        };
        if split == Split::Claim {
            let own = own.into_inner();
            // Waking a worker held the call back only if the caller then
            // waited for the workers no longer than a wake-up takes (tens
            // of microseconds; [`WAKE_WAIT`]) or two of its own indices: a
            // worker that lost its core holding one keeps it a scheduler
            // slice, milliseconds.
            let per_index = (own_done - own_start) / own.max(1) as u32;
            let held = own_done.elapsed() > (per_index * 2).max(WAKE_WAIT);
            self.judge(
                &mut backoff,
                allowed,
                tasks,
                own,
                own_cpu,
                start,
                woke && !held,
            );
        }
        drop(backoff);
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if let Some(p) = worker_panic {
            resume_unwind(p);
        }
    }
}

/// A worker's part of a detached job: claims until none are left, marking
/// each index that ran to the end. A panicking index stays unmarked (its
/// payload is dropped), so the caller runs it again itself. `delay` (tests)
/// is slept after the first claim.
fn run_detached_share(d: &Detached, delay: Duration) {
    let mut first = true;
    loop {
        // Relaxed: the counter only makes claims unique; results are
        // published by the `done` flags.
        let i = d.next.fetch_add(1, Ordering::Relaxed);
        if i >= d.tasks {
            return;
        }
        if std::mem::replace(&mut first, false) && !delay.is_zero() {
            std::thread::sleep(delay);
        }
        if catch_unwind(AssertUnwindSafe(|| (d.work)(i))).is_ok() {
            d.done[i].store(true, Ordering::Release);
        }
    }
}

fn worker(shared: Arc<Shared>, id: usize) {
    let (_g, _s) = (FlagGuard::enter(&IN_POOL), FlagGuard::enter(&SHARING));
    let mut seen = 0u64;
    #[cfg(test)]
    let mut delayed = false;
    loop {
        spin_until(|| shared.epoch_hint.load(Ordering::Acquire) != seen);
        let job = {
            let mut st = shared.lock();
            loop {
                if st.shutdown {
                    return;
                }
                if st.epoch != seen {
                    #[cfg(test)]
                    if !shared.take_delay.is_zero() && !std::mem::replace(&mut delayed, true) {
                        drop(st);
                        std::thread::sleep(shared.take_delay);
                        st = shared.lock();
                        continue;
                    }
                    #[cfg(test)]
                    {
                        delayed = false;
                    }
                    seen = st.epoch;
                    match &st.job {
                        Some(Published::Borrowed(job)) if id < job.active => {
                            let job = *job;
                            if job.split == Split::Claim {
                                st.remaining += 1;
                                shared.remaining_hint.store(st.remaining, Ordering::Release);
                            }
                            break Published::Borrowed(job);
                        }
                        Some(Published::Detached(d)) if id < d.active => {
                            break Published::Detached(Arc::clone(d))
                        }
                        // Not taking part in this job, or it was withdrawn:
                        // wait for the next one.
                        _ => {}
                    }
                }
                st.parked[id] = true;
                st = shared.work.wait(st).unwrap_or_else(|e| e.into_inner());
                st.parked[id] = false;
            }
        };
        let job = match job {
            Published::Borrowed(job) => job,
            Published::Detached(d) => {
                #[cfg(test)]
                let delay = shared.claim_delay;
                #[cfg(not(test))]
                let delay = Duration::ZERO;
                run_detached_share(&d, delay);
                continue;
            }
        };
        // SAFETY: `Pool::dispatch` keeps the closure alive until `remaining`
        // reaches zero, which needs this worker's decrement below.
        let f = unsafe { &*job.f };
        let result = share(f, job.split, job.tasks, job.active, id, &shared.next.0);
        let mut st = shared.lock();
        if let Err(p) = result {
            if st.panic.is_none() {
                st.panic = Some(p);
            }
        }
        st.remaining -= 1;
        shared.remaining_hint.store(st.remaining, Ordering::Release);
        if st.remaining == 0 {
            shared.done.notify_all();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.work.notify_all();
        for h in self.workers.drain(..) {
            // Tasks never unwind out of a worker, so join only fails if the
            // worker loop itself panicked; nothing is left to clean up then.
            let _ = h.join();
        }
    }
}

/// Physical cores available to this process: unique (package, core) pairs
/// among the CPUs the process may run on (Linux sysfs, then /proc/cpuinfo),
/// capped by `available_parallelism` (affinity and cgroup quota); elsewhere,
/// or when the topology cannot be read, `available_parallelism`.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    match linux_physical_cores() {
        Some(p) if p > 0 => p.min(logical),
        _ => logical,
    }
}

/// Parses a CPU list such as `0-3,8,10-11`.
fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (
                    a.trim().parse::<usize>().ok()?,
                    b.trim().parse::<usize>().ok()?,
                );
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

/// CPUs this process may run on, from /proc/self/status.
fn allowed_cpus() -> Option<Vec<usize>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(line).filter(|v| !v.is_empty())
}

fn linux_physical_cores() -> Option<usize> {
    use std::collections::HashSet;
    let cpus = allowed_cpus().or_else(|| {
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
        parse_cpu_list(&online)
    });
    // sysfs topology.
    if let Some(cpus) = &cpus {
        let read = |cpu: usize, what: &str| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
        };
        let mut cores = HashSet::new();
        let mut complete = true;
        for &cpu in cpus {
            match (read(cpu, "physical_package_id"), read(cpu, "core_id")) {
                (Some(p), Some(c)) => {
                    cores.insert((p, c));
                }
                _ => {
                    complete = false;
                    break;
                }
            }
        }
        if complete && !cores.is_empty() {
            return Some(cores.len());
        }
    }
    // /proc/cpuinfo (x86: "physical id" and "core id" per processor).
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mut cores = HashSet::new();
    for block in info.split("\n\n") {
        let field = |name: &str| {
            block.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name)
                    .then(|| v.trim().parse::<i64>().ok())
                    .flatten()
            })
        };
        let (Some(proc_id), Some(core)) = (field("processor"), field("core id")) else {
            continue;
        };
        if let Some(cpus) = &cpus {
            if !cpus.contains(&(proc_id as usize)) {
                continue;
            }
        }
        cores.insert((field("physical id").unwrap_or(0), core));
    }
    (!cores.is_empty()).then_some(cores.len())
}

/// Parses a `KGEN_THREADS` value: a whole number >= 1.
fn parse_threads(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(0) => Err("0 threads".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Threads a one-off parallel job outside the pool (a repack's scoped
/// threads) should use from the calling thread: the global pool's size, or
/// 1 on a thread that runs its share of a pool job other threads share
/// too, which keep the other cores busy (`Model::load_all` repacks a
/// tensor per pool thread). A pool call that runs inline (one thread or
/// one task, a backed-off split, a nested call) leaves it at the pool's
/// size.
pub fn side_threads() -> usize {
    if SHARING.with(|c| c.get()) {
        1
    } else {
        global().threads()
    }
}

/// The process-wide pool, built on first use with `KGEN_THREADS` threads if
/// that variable is set to a valid count, else [`physical_cores`] threads.
pub fn global() -> &'static Pool {
    static GLOBAL: OnceLock<Pool> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        let threads = match std::env::var("KGEN_THREADS") {
            Ok(v) => match parse_threads(&v) {
                Ok(n) => n,
                Err(e) => {
                    let n = physical_cores();
                    eprintln!("kgen: ignoring KGEN_THREADS={v:?} ({e}); using {n} threads (physical cores)");
                    n
                }
            },
            Err(std::env::VarError::NotPresent) => physical_cores(),
            Err(std::env::VarError::NotUnicode(v)) => {
                let n = physical_cores();
                eprintln!("kgen: ignoring non-UTF-8 KGEN_THREADS={v:?}; using {n} threads (physical cores)");
                n
            }
        };
        Pool::new(threads)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn check_once(pool: &Pool, tasks: usize) {
        let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
        pool.run(tasks, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        for (i, h) in hits.iter().enumerate() {
            assert_eq!(
                h.load(Ordering::Relaxed),
                1,
                "task {i} of {tasks} on {} threads",
                pool.threads()
            );
        }
    }

    #[test]
    fn every_task_runs_exactly_once() {
        for threads in 1..=4 {
            let pool = Pool::new(threads);
            assert_eq!(pool.threads(), threads);
            for tasks in [0, 1, 2, 3, 7, 100] {
                check_once(&pool, tasks);
            }
        }
    }

    #[test]
    fn repeated_runs_on_one_pool() {
        let pool = Pool::new(4);
        for round in 0..2000 {
            check_once(&pool, round % 13);
        }
        let sum = AtomicUsize::new(0);
        for _ in 0..100 {
            pool.run(1000, &|i| {
                sum.fetch_add(i, Ordering::Relaxed);
            });
        }
        assert_eq!(sum.load(Ordering::Relaxed), 100 * 999 * 1000 / 2);
    }

    #[test]
    fn work_is_spread_over_threads_and_caller_takes_part() {
        let pool = Pool::new(4);
        let ids: Vec<Mutex<Option<std::thread::ThreadId>>> =
            (0..4).map(|_| Mutex::new(None)).collect();
        pool.run(4, &|i| {
            *ids[i].lock().unwrap() = Some(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_millis(5));
        });
        let ids: Vec<_> = ids
            .into_iter()
            .map(|m| m.into_inner().unwrap().unwrap())
            .collect();
        assert_eq!(ids[0], std::thread::current().id());
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), 4);
    }

    #[test]
    fn borrows_of_the_callers_stack_are_written_before_return() {
        let pool = Pool::new(3);
        let out: Vec<Mutex<u64>> = (0..50).map(|_| Mutex::new(0)).collect();
        pool.run(out.len(), &|i| *out[i].lock().unwrap() = (i * i) as u64);
        for (i, v) in out.iter().enumerate() {
            assert_eq!(*v.lock().unwrap(), (i * i) as u64);
        }
    }

    #[test]
    fn panics_propagate_without_hanging() {
        for threads in 1..=4 {
            let pool = Pool::new(threads);
            for bad in [0, 5, 99] {
                let done = AtomicUsize::new(0);
                let r = catch_unwind(AssertUnwindSafe(|| {
                    pool.run(100, &|i| {
                        if i == bad {
                            panic!("task {i} failed");
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    })
                }));
                let msg = r.unwrap_err();
                let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
                assert_eq!(msg, format!("task {bad} failed"));
                if threads > 1 {
                    // Other threads' chunks complete; only the panicking
                    // chunk stops early.
                    assert!(done.load(Ordering::Relaxed) >= 100 - 100 / threads - 1);
                }
                // The pool still works afterwards.
                check_once(&pool, 17);
            }
        }
    }

    #[test]
    fn nested_and_concurrent_runs_do_not_deadlock() {
        let pool = Pool::new(3);
        let count = AtomicUsize::new(0);
        pool.run(3, &|_| {
            pool.run(4, &|_| {
                count.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(count.load(Ordering::Relaxed), 12);
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        pool.run(10, &|_| {
                            total.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 50 * 10);
    }

    #[test]
    fn cpu_lists_and_thread_counts_parse() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_threads(" 6 "), Ok(6));
        assert!(parse_threads("0").is_err());
        assert!(parse_threads("many").is_err());
        let p = physical_cores();
        assert!(
            p >= 1
                && p <= std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
        );
    }

    fn check_claims_once(pool: &Pool, tasks: usize) {
        let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
        pool.run_chunks(tasks, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        for (i, h) in hits.iter().enumerate() {
            assert_eq!(
                h.load(Ordering::Relaxed),
                1,
                "claimed chunk {i} of {tasks} on {} threads",
                pool.threads()
            );
        }
    }

    #[test]
    fn every_claimed_chunk_runs_exactly_once() {
        for threads in 1..=5 {
            let pool = Pool::new(threads);
            for tasks in [0, 1, 2, 3, 7, 100, 1000] {
                check_claims_once(&pool, tasks);
            }
            // Alternating with static runs: each job starts a fresh count.
            for round in 0..500 {
                check_claims_once(&pool, round % 11);
                check_once(&pool, round % 7);
            }
        }
    }

    #[test]
    fn a_slow_thread_claims_fewer_chunks() {
        // The caller stalls on its first claim; the worker takes the rest
        // instead of waiting with a fixed half of the work.
        let pool = Pool::new(2);
        let caller = std::thread::current().id();
        let stalled = std::sync::atomic::AtomicBool::new(false);
        let by_worker = AtomicUsize::new(0);
        pool.run_chunks(40, &|_| {
            if std::thread::current().id() == caller {
                if !stalled.swap(true, Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(300));
                }
            } else {
                by_worker.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        assert!(
            by_worker.load(Ordering::Relaxed) >= 30,
            "the worker took only {} of 40 chunks",
            by_worker.load(Ordering::Relaxed)
        );
    }

    #[test]
    fn claimed_chunk_panics_propagate_and_the_rest_still_run() {
        for threads in 1..=4 {
            let pool = Pool::new(threads);
            for bad in [0, 5, 99] {
                let done = AtomicUsize::new(0);
                let r = catch_unwind(AssertUnwindSafe(|| {
                    pool.run_chunks(100, &|i| {
                        if i == bad {
                            panic!("chunk {i} failed");
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    })
                }));
                let msg = r.unwrap_err();
                let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
                assert_eq!(msg, format!("chunk {bad} failed"));
                // Every other chunk ran, inline or on any thread.
                assert_eq!(done.load(Ordering::Relaxed), 99);
                check_claims_once(&pool, 17);
            }
        }
    }

    #[test]
    fn a_worker_that_has_not_taken_the_job_does_not_hold_the_call() {
        // The worker waits a second before taking each new job, as if parked
        // or without a core; claimed chunks are all done by the caller, and
        // the call returns without waiting for the worker.
        TAKE_DELAY.with(|d| d.set(Duration::from_secs(1)));
        let pool = Pool::new(2);
        TAKE_DELAY.with(|d| d.set(Duration::ZERO));
        for _ in 0..3 {
            let start = Instant::now();
            check_claims_once(&pool, 20);
            assert!(
                start.elapsed() < Duration::from_millis(500),
                "run_chunks waited {:?} for a worker that had not joined",
                start.elapsed()
            );
        }
        // Static shares are still waited for, and the worker still works.
        let ids: Vec<Mutex<Option<std::thread::ThreadId>>> =
            (0..2).map(|_| Mutex::new(None)).collect();
        pool.run(2, &|i| {
            *ids[i].lock().unwrap() = Some(std::thread::current().id())
        });
        let ids: Vec<_> = ids
            .into_iter()
            .map(|m| m.into_inner().unwrap().unwrap())
            .collect();
        assert_ne!(ids[0], ids[1]);
    }

    /// A detached job of `tasks` indices whose results are `i * i + 1`:
    /// workers write them into an owned scratch, the caller in place or by
    /// adopting. Returns (results, indices run by the caller, adopted ones).
    fn detached_squares(
        pool: &Pool,
        tasks: usize,
        work_calls: &Arc<AtomicUsize>,
        task_time: Duration,
        work_panics: bool,
    ) -> (Vec<u64>, usize, usize) {
        let scratch: Arc<Vec<AtomicU64>> =
            Arc::new((0..tasks).map(|_| AtomicU64::new(0)).collect());
        let work = {
            let (scratch, calls) = (Arc::clone(&scratch), Arc::clone(work_calls));
            move |i: usize| {
                calls.fetch_add(1, Ordering::Relaxed);
                assert!(!work_panics, "a worker's index panics");
                std::thread::sleep(task_time);
                scratch[i].store((i * i + 1) as u64, Ordering::Relaxed);
            }
        };
        let out: Vec<Mutex<u64>> = (0..tasks).map(|_| Mutex::new(0)).collect();
        let (mine_n, adopt_n) = (Cell::new(0), Cell::new(0));
        pool.run_detached(
            tasks,
            Box::new(work),
            &|i| {
                std::thread::sleep(task_time);
                *out[i].lock().unwrap() = (i * i + 1) as u64;
                mine_n.set(mine_n.get() + 1);
            },
            &|i| {
                *out[i].lock().unwrap() = scratch[i].load(Ordering::Relaxed);
                adopt_n.set(adopt_n.get() + 1);
            },
        );
        let out = out.into_iter().map(|m| m.into_inner().unwrap()).collect();
        (out, mine_n.get(), adopt_n.get())
    }

    #[test]
    fn detached_jobs_run_every_index_once_and_adopt_the_workers_results() {
        for threads in 1..=4 {
            let pool = Pool::new(threads);
            for tasks in [0, 1, 2, 3, 7, 40] {
                let calls = Arc::new(AtomicUsize::new(0));
                let (out, mine, adopted) =
                    detached_squares(&pool, tasks, &calls, Duration::ZERO, false);
                let want: Vec<u64> = (0..tasks).map(|i| (i * i + 1) as u64).collect();
                assert_eq!(out, want, "{tasks} indices on {threads} threads");
                // Each index ran in the caller or was adopted from a worker,
                // and only a worker's finished index is adopted.
                assert_eq!(mine + adopted, tasks);
                assert!(adopted <= calls.load(Ordering::Relaxed));
            }
        }
    }

    #[test]
    fn a_worker_that_loses_its_core_holding_an_index_does_not_hold_the_call() {
        // The worker sleeps a second right after claiming its first index,
        // as if another process took its core then. The caller runs that
        // index itself after a short wait and returns; the worker's late
        // result is never adopted.
        CLAIM_DELAY.with(|d| d.set(Duration::from_secs(1)));
        let pool = Pool::new(2);
        CLAIM_DELAY.with(|d| d.set(Duration::ZERO));
        let calls = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let (out, mine, adopted) =
            detached_squares(&pool, 20, &calls, Duration::from_millis(5), false);
        let took = start.elapsed();
        assert_eq!(out, (0..20).map(|i| (i * i + 1) as u64).collect::<Vec<_>>());
        assert!(
            took < Duration::from_millis(500),
            "waited {took:?} for a stalled worker"
        );
        // Nothing delivered in time: the caller ran every index.
        assert_eq!((mine, adopted), (20, 0));
        // The next call does not wait for the late worker either.
        let start = Instant::now();
        let (out, _, _) = detached_squares(&pool, 20, &calls, Duration::from_millis(1), false);
        assert_eq!(out, (0..20).map(|i| (i * i + 1) as u64).collect::<Vec<_>>());
        assert!(start.elapsed() < Duration::from_millis(500));
        // Dropping the pool joins the worker, which then runs its claim: the
        // worker did hold one (it had 100 ms to wake up and take it).
        drop(pool);
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "the worker's claim of the first call"
        );
    }

    #[test]
    fn backoff_drops_a_thread_for_longer_while_calls_gain_nothing() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut b = Backoff::default();
        assert_eq!(b.threads(2, t0), 2);
        b.record(2, 2, false, ms(1), t0);
        assert_eq!(b.threads(2, t0), 2);
        // A 1 ms call that gained nothing: calls in the next 2 ms run on 1
        // thread, then the pool tries 2 again; each failing try doubles the
        // wait, up to MAX_WAIT.
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..7 {
            b.record(2, 2, true, ms(1), now);
            let from = now;
            while b.threads(2, now) == 1 {
                now += Duration::from_micros(100);
            }
            waits.push((now - from).as_millis());
        }
        assert_eq!(waits, [2, 4, 8, 16, 20, 20, 20]);
        // One call that gains again resets the wait.
        b.record(2, 2, false, ms(1), now);
        b.record(2, 2, true, ms(1), now);
        assert_eq!(b.threads(2, now + ms(1)), 1);
        assert_eq!(b.threads(2, now + ms(2)), 2);
        // A long call waits longer, still at most MAX_WAIT.
        b.record(2, 2, true, ms(30), now);
        assert_eq!(b.threads(2, now + ms(19)), 1);
        assert_eq!(b.threads(2, now + ms(20)), 2);
        // Larger pools drop one thread more each time a reduced call fails.
        let mut b = Backoff::default();
        b.record(4, 4, true, ms(1), t0);
        assert_eq!(b.threads(4, t0), 3);
        b.record(4, 3, true, ms(1), t0);
        assert_eq!(b.threads(4, t0), 2);
        b.record(4, 2, true, ms(1), t0);
        assert_eq!(b.threads(4, t0), 1);
    }

    /// Pins the calling thread (and the threads it then spawns) to `cpus`,
    /// or back to `old`; returns the mask it had.
    #[cfg(target_os = "linux")]
    fn pin(cpus: Option<&[usize]>, old: Option<libc::cpu_set_t>) -> libc::cpu_set_t {
        // SAFETY: plain syscalls on this thread with a zeroed, then filled,
        // cpu_set_t of the size passed.
        unsafe {
            let mut was: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            assert_eq!(libc::sched_getaffinity(0, size, &mut was), 0);
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            match (cpus, old) {
                (Some(cpus), _) => cpus.iter().for_each(|&c| libc::CPU_SET(c, &mut set)),
                (None, Some(old)) => set = old,
                (None, None) => return was,
            }
            assert_eq!(libc::sched_setaffinity(0, size, &set), 0);
            was
        }
    }

    /// Spins until this thread has used `each` of CPU time (wall time
    /// would let a thread switched out mid-spin finish early).
    #[cfg(target_os = "linux")]
    fn spin_cpu(each: Duration) {
        let start = thread_cpu_time().expect("thread CPU time");
        while thread_cpu_time().unwrap() - start < each {
            std::hint::spin_loop();
        }
    }

    /// Runs a detached job of `tasks` indices that each spin for `each` of
    /// CPU time; returns (results, caller's, adopted).
    #[cfg(target_os = "linux")]
    fn detached_spins(pool: &Pool, tasks: usize, each: Duration) -> (Vec<u64>, usize, usize) {
        let spin = spin_cpu;
        let scratch: Arc<Vec<AtomicU64>> =
            Arc::new((0..tasks).map(|_| AtomicU64::new(0)).collect());
        let work = {
            let scratch = Arc::clone(&scratch);
            move |i: usize| {
                spin(each);
                scratch[i].store(i as u64 + 7, Ordering::Relaxed);
            }
        };
        let out: Vec<AtomicU64> = (0..tasks).map(|_| AtomicU64::new(0)).collect();
        let (mine_n, adopt_n) = (Cell::new(0), Cell::new(0));
        pool.run_detached(
            tasks,
            Box::new(work),
            &|i| {
                spin(each);
                out[i].store(i as u64 + 7, Ordering::Relaxed);
                mine_n.set(mine_n.get() + 1);
            },
            &|i| {
                out[i].store(scratch[i].load(Ordering::Relaxed), Ordering::Relaxed);
                adopt_n.set(adopt_n.get() + 1);
            },
        );
        let out = out.into_iter().map(|a| a.into_inner()).collect();
        (out, mine_n.get(), adopt_n.get())
    }

    /// Waits (up to 10 s) until worker `id` of `pool` is parked.
    fn until_parked(pool: &Pool, id: usize) {
        let start = Instant::now();
        while !pool.shared.lock().parked[id] {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "worker {id} never parked"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_call_that_wakes_a_parked_worker_does_not_back_off() {
        // Each call finds the worker parked and has tasks far shorter than
        // waking it takes, so the caller runs them alone: no gain, but the
        // wake-up's fault, and the pool keeps both threads.
        //
        // A woken worker that claims an index and then loses its core (the
        // other tests share the two cores) makes the caller run that index
        // again, and such a call is judged as usual, by design: its round
        // does not count, and the next one starts on a fresh pool, without
        // the back-off it recorded. (Asserting every round failed about one
        // run in five that way.)
        let mut pool = Pool::new(2);
        let (mut clean, mut woke) = (0, 0);
        for round in 0..40 {
            if clean == 4 {
                break;
            }
            let before = pool.stats();
            until_parked(&pool, 1);
            let hits: Vec<AtomicUsize> = (0..2).map(|_| AtomicUsize::new(0)).collect();
            pool.run_chunks(2, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            until_parked(&pool, 1);
            let (out, mine, adopted) = detached_spins(&pool, 2, Duration::ZERO);
            assert_eq!(out, vec![7, 8], "round {round}");
            assert_eq!(mine + adopted, 2);
            let st = pool.stats();
            if st.rerun > before.rerun {
                pool = Pool::new(2);
                continue;
            }
            assert_eq!(
                st.no_gain - before.no_gain,
                st.woke - before.woke,
                "round {round}: {st:?}"
            );
            assert_eq!(st.reduced, 0, "round {round}: {st:?}");
            assert!(pool.run_lock.lock().unwrap().until.is_none());
            clean += 1;
            woke += st.woke - before.woke;
        }
        assert_eq!(clean, 4, "four rounds without a stalled worker");
        // The calls did gain nothing (so the test tests something).
        assert!(woke > 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn calls_that_gain_nothing_from_the_workers_run_on_fewer_threads() {
        // Caller and workers pinned to one CPU take turns on it: a call can
        // never beat the caller alone, so the next calls run on fewer
        // threads (and then try all again), every result still right.
        for threads in [2, 3] {
            let cpu = allowed_cpus().map_or(0, |c| c[0]);
            let was = pin(Some(&[cpu]), None);
            let pool = Pool::new(threads);
            let want: Vec<u64> = (0..12).map(|i| i + 7).collect();
            let rounds = 8;
            for round in 0..rounds {
                let (out, mine, adopted) = detached_spins(&pool, 12, Duration::from_micros(300));
                assert_eq!(out, want, "round {round}");
                assert_eq!(mine + adopted, 12, "round {round}");
            }
            pin(None, Some(was));
            let st = pool.stats();
            assert_eq!(st.calls, rounds);
            // The first call gains nothing; the next two run reduced; the
            // fourth tries all threads again and gains nothing; ..
            assert!(st.no_gain >= 2, "{st:?}");
            assert!(st.reduced >= 4, "{st:?}");
            // The same for borrowed claims (`run_chunks`).
            let was = pin(Some(&[cpu]), None);
            let pool = Pool::new(threads);
            for round in 0..rounds {
                let hits: Vec<AtomicUsize> = (0..12).map(|_| AtomicUsize::new(0)).collect();
                pool.run_chunks(12, &|i| {
                    spin_cpu(Duration::from_micros(300));
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "round {round}"
                );
            }
            pin(None, Some(was));
            let st = pool.stats();
            assert_eq!(st.calls, rounds);
            assert!(st.no_gain >= 2, "{st:?}");
            assert!(st.reduced >= 4, "{st:?}");
        }
    }

    #[test]
    fn a_worker_panic_in_a_detached_job_is_rerun_by_the_caller() {
        let pool = Pool::new(3);
        let calls = Arc::new(AtomicUsize::new(0));
        let (out, mine, adopted) =
            detached_squares(&pool, 30, &calls, Duration::from_micros(200), true);
        assert_eq!(out, (0..30).map(|i| (i * i + 1) as u64).collect::<Vec<_>>());
        assert_eq!((mine, adopted), (30, 0));
        // A panic in the caller's own part still reaches the caller (the
        // workers' panics are dropped, and index 2 then runs in the caller).
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run_detached(
                4,
                Box::new(|i| assert_ne!(i, 2, "index 2")),
                &|i| assert_ne!(i, 2, "index 2"),
                &|_| {},
            )
        }));
        assert!(r.is_err());
    }

    #[test]
    fn side_threads_is_one_inside_shared_pool_tasks() {
        assert_eq!(side_threads(), global().threads());
        let pool = Pool::new(2);
        let inside = Mutex::new(Vec::new());
        pool.run_chunks(6, &|_| inside.lock().unwrap().push(side_threads()));
        assert_eq!(*inside.lock().unwrap(), vec![1; 6]);
        assert_eq!(
            side_threads(),
            global().threads(),
            "reset once the call returns"
        );
        // Inline runs (one thread, one task) share no core.
        let inline = Mutex::new(Vec::new());
        Pool::new(1).run_chunks(3, &|_| inline.lock().unwrap().push(side_threads()));
        pool.run_chunks(1, &|_| inline.lock().unwrap().push(side_threads()));
        assert_eq!(*inline.lock().unwrap(), vec![global().threads(); 4]);
    }

    #[test]
    fn nested_and_concurrent_claims_do_not_deadlock() {
        let pool = Pool::new(3);
        let count = AtomicUsize::new(0);
        pool.run_chunks(5, &|_| {
            pool.run_chunks(4, &|_| {
                count.fetch_add(1, Ordering::Relaxed);
            });
            pool.run(3, &|_| {
                count.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(count.load(Ordering::Relaxed), 5 * 7);
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (pool, total) = (&pool, &total);
                s.spawn(move || {
                    for _ in 0..50 {
                        let f = |_| {
                            total.fetch_add(1, Ordering::Relaxed);
                        };
                        if t % 2 == 0 {
                            pool.run_chunks(10, &f);
                        } else {
                            pool.run(10, &f);
                        }
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 50 * 10);
    }

    #[test]
    fn chunks_cover_the_range() {
        for tasks in 0..40 {
            for active in 1..6 {
                let mut next = 0;
                for t in 0..active {
                    let (s, e) = chunk(tasks, active, t);
                    assert_eq!(s, next);
                    next = e;
                }
                assert_eq!(next, tasks);
            }
        }
    }
}
