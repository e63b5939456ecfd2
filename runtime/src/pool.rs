//! A small persistent thread pool for splitting kernel calls across cores.
//!
//! [`Pool::run`] hands out `tasks` indices in static contiguous chunks, one
//! per thread; the calling thread is thread 0 and does the first chunk itself,
//! so a pool of `threads` has `threads - 1` worker threads. Workers park on a
//! condition variable between calls; nothing is spawned per call.
//!
//! # Safety argument
//!
//! `run` takes `f: &(dyn Fn(usize) + Sync)` that may borrow the caller's stack,
//! and publishes it to the workers as a lifetime-erased raw pointer. That is
//! sound because `run` does not return (nor unwind) before every worker that
//! was given the job has signalled, under the state mutex, that it is done
//! with it:
//!
//! * the job is published together with `remaining = participating workers`
//!   under the mutex; each participating worker copies it, calls `f` outside
//!   the lock, then decrements `remaining` under the mutex and never touches
//!   the pointer again (it goes back to waiting for a newer epoch);
//! * `run` executes its own chunk inside `catch_unwind`, then waits on the
//!   condition variable until `remaining == 0`, clears the pointer and only
//!   then returns or resumes a panic. Worker tasks are also run inside
//!   `catch_unwind`, so a panicking task still decrements `remaining`;
//! * no user code runs while the state mutex is held, so the mutex cannot be
//!   poisoned by a task; poisoning is nevertheless tolerated (`into_inner`),
//!   so waiting can never be cut short by a panic elsewhere;
//! * concurrent `run` calls on one pool (it is `Sync`) are serialized by a
//!   second mutex, and a `run` nested inside a task (same or worker thread)
//!   executes inline instead of waiting for itself;
//! * `f` is `Sync`, so calling it from several threads at once is allowed, and
//!   the mutex hand-offs order everything the tasks wrote before `run` returns.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// A published job: the erased closure and how the index space is split.
#[derive(Clone, Copy)]
struct Job {
    f: *const Task,
    tasks: usize,
    /// Threads taking part (caller included); workers with id >= this idle.
    active: usize,
}

// SAFETY: the pointee is `Sync`, so sharing the pointer with other threads is
// fine; its lifetime is guaranteed by `Pool::run` (see the module docs).
unsafe impl Send for Job {}

struct State {
    epoch: u64,
    job: Option<Job>,
    remaining: usize,
    panic: Option<Payload>,
    shutdown: bool,
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
}

/// Spins until `cond` or [`SPIN`] has passed.
fn spin_until(cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() && start.elapsed() < SPIN {
        std::hint::spin_loop();
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
}

/// Resets `IN_POOL` on scope exit, unwinding included.
struct InPoolGuard(bool);

impl InPoolGuard {
    fn enter() -> InPoolGuard {
        InPoolGuard(IN_POOL.with(|c| c.replace(true)))
    }
}

impl Drop for InPoolGuard {
    fn drop(&mut self) {
        let prev = self.0;
        IN_POOL.with(|c| c.set(prev));
    }
}

/// Task range `[start, end)` of thread `t` when `tasks` are split over `active` threads.
fn chunk(tasks: usize, active: usize, t: usize) -> (usize, usize) {
    let at = |t: usize| (t as u128 * tasks as u128 / active as u128) as usize;
    (at(t), at(t + 1))
}

/// A persistent pool of `threads - 1` workers plus the calling thread.
pub struct Pool {
    threads: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes `run` calls from different threads.
    run_lock: Mutex<()>,
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
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            epoch_hint: AtomicU64::new(0),
            remaining_hint: AtomicUsize::new(0),
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
            run_lock: Mutex::new(()),
        }
    }

    /// Threads that run tasks, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Calls `f(i)` once for every `i` in `0..tasks`, split in contiguous
    /// chunks over the pool's threads (the caller does the first chunk), and
    /// returns when all calls are done. If a task panics, the remaining tasks
    /// still finish and the first panic is then resumed in the caller.
    pub fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        let active = self.threads.min(tasks);
        if active <= 1 || IN_POOL.with(|c| c.get()) {
            let _g = InPoolGuard::enter();
            (0..tasks).for_each(f);
            return;
        }
        let _serial = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: only the lifetime bound of the trait object is erased (same
        // fat-pointer layout). The pointer is dereferenced by workers only
        // between publication below and their `remaining` decrement, and this
        // function waits for `remaining == 0` before returning or unwinding.
        let ptr: *const Task =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const Task>(f) };
        {
            let mut st = self.shared.lock();
            st.epoch = st.epoch.wrapping_add(1);
            st.job = Some(Job {
                f: ptr,
                tasks,
                active,
            });
            st.remaining = active - 1;
            st.panic = None;
            self.shared
                .remaining_hint
                .store(active - 1, Ordering::Release);
            self.shared.epoch_hint.store(st.epoch, Ordering::Release);
        }
        self.shared.work.notify_all();

        let mine = {
            let _g = InPoolGuard::enter();
            let (start, end) = chunk(tasks, active, 0);
            catch_unwind(AssertUnwindSafe(|| (start..end).for_each(f)))
        };

        spin_until(|| self.shared.remaining_hint.load(Ordering::Acquire) == 0);
        let worker_panic = {
            let mut st = self.shared.lock();
            while st.remaining > 0 {
                st = self.shared.done.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.job = None;
            st.panic.take()
        };
        if let Err(p) = mine {
            resume_unwind(p);
        }
        if let Some(p) = worker_panic {
            resume_unwind(p);
        }
    }
}

fn worker(shared: Arc<Shared>, id: usize) {
    let _g = InPoolGuard::enter();
    let mut seen = 0u64;
    loop {
        spin_until(|| shared.epoch_hint.load(Ordering::Acquire) != seen);
        let job = {
            let mut st = shared.lock();
            loop {
                if st.shutdown {
                    return;
                }
                if st.epoch != seen {
                    seen = st.epoch;
                    match st.job {
                        Some(job) if id < job.active => break job,
                        // Not taking part in this job: wait for the next one.
                        _ => {}
                    }
                }
                st = shared.work.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        let (start, end) = chunk(job.tasks, job.active, id);
        let result = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `Pool::run` keeps the closure alive until `remaining`
            // reaches zero, which needs this worker's decrement below.
            let f = unsafe { &*job.f };
            (start..end).for_each(f);
        }));
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
