//! What a QP's creating process tells of its training job: the launcher's variables in its
//! environment (`/proc/<pid>/environ`) and the pod and container in its cgroup
//! (`/proc/<pid>/cgroup`). An environment holds secrets: only the variables named in
//! [`VARIABLES`] are kept, and nothing else of it is stored, printed or copied.
//!
//! Reading another process's environment takes what ptrace's read check takes: CAP_SYS_PTRACE,
//! or the same user with every capability the process has. Without it the rank stays unknown
//! and `unread` says why; the cgroup file is readable by all.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

use crate::model::nic::{ProcessJob, Qp};

/// The variables kept, in the order their meanings are looked up.
pub const VARIABLES: &[&str] = &[
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "SLURM_NTASKS",
];

/// The job variables of an environment block (`NAME=value` entries ended by NUL), the others
/// dropped unread past their name.
pub fn job_variables(environ: &[u8]) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for entry in environ.split(|b| *b == 0) {
        let Some(eq) = entry.iter().position(|b| *b == b'=') else {
            continue;
        };
        let (name, value) = (&entry[..eq], &entry[eq + 1..]);
        if let Some(v) = VARIABLES.iter().find(|v| v.as_bytes() == name)
            && let Ok(value) = std::str::from_utf8(value)
        {
            out.push((*v, value.to_string()));
        }
    }
    out
}

/// What the job variables tell (later entries of one name win, as getenv's do not: launchers
/// set each once).
pub fn from_variables(vars: &[(&str, String)]) -> ProcessJob {
    let get = |name: &str| {
        vars.iter()
            .rev()
            .find(|(n, v)| *n == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    };
    let number = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| get(n)?.trim().parse::<u32>().ok())
    };
    // torchrun's default run id is "none" (a static rendezvous): it names no job.
    let job = get("TORCHELASTIC_RUN_ID")
        .filter(|id| *id != "none")
        .map(|id| format!("torchelastic:{id}"))
        .or_else(|| get("SLURM_JOB_ID").map(|id| format!("slurm:{id}")))
        .or_else(|| match (get("MASTER_ADDR"), get("MASTER_PORT")) {
            (Some(a), Some(p)) => Some(format!("torch:{a}:{p}")),
            _ => None,
        });
    ProcessJob {
        job,
        rank: number(&["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"]),
        local_rank: number(&[
            "LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "MPI_LOCALRANKID",
            "SLURM_LOCALID",
        ]),
        world_size: number(&[
            "WORLD_SIZE",
            "OMPI_COMM_WORLD_SIZE",
            "PMI_SIZE",
            "SLURM_NTASKS",
        ]),
        ..ProcessJob::default()
    }
}

/// The Kubernetes pod's UID and the container's ID of a `/proc/<pid>/cgroup` file, under the
/// cgroupfs driver (`/kubepods/burstable/pod<uid>/<id>`) or systemd's
/// (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/
/// cri-containerd-<id>.scope`), and a container's ID under Docker, containerd, CRI-O or Podman
/// alone.
pub fn pod_and_container(cgroup: &str) -> (Option<String>, Option<String>) {
    let (mut pod, mut container) = (None, None);
    for line in cgroup.lines() {
        // hierarchy-ID:controllers:path
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        for seg in path.split('/') {
            let seg = seg
                .strip_suffix(".slice")
                .or_else(|| seg.strip_suffix(".scope"))
                .unwrap_or(seg);
            if let Some(at) = seg.rfind("pod") {
                let uid = seg[at + 3..].replace('_', "-");
                if uid.len() == 36 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
                    pod = Some(uid);
                }
            }
            let id = seg.rsplit('-').next().unwrap_or(seg);
            if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                container = Some(id.to_string());
            }
        }
        if pod.is_some() || container.is_some() {
            break;
        }
    }
    (pod, container)
}

/// What process `pid` tells, read under `root` (`/` live, or a copied tree's `proc/<pid>/`);
/// none when the tree has nothing of it.
pub fn read(root: &Path, pid: u32) -> Option<ProcessJob> {
    let dir = root.join("proc").join(pid.to_string());
    let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok();
    let (pod, container) = cgroup.as_deref().map(pod_and_container).unwrap_or_default();
    let mut job = match std::fs::read(dir.join("environ")) {
        Ok(environ) => from_variables(&job_variables(&environ)),
        Err(e) => {
            // Nothing of the process: gone (live), or not in the copy.
            if cgroup.is_none() && e.kind() == std::io::ErrorKind::NotFound && !dir.is_dir() {
                return None;
            }
            ProcessJob {
                unread: Some(format!("{}: {e}", dir.join("environ").display())),
                ..ProcessJob::default()
            }
        }
    };
    job.pod = pod;
    job.container = container;
    Some(job)
}

/// A process read: its start time when read (a pid taken again by a new process starts
/// later), and what it told.
type Read = (Option<u64>, Option<ProcessJob>);

/// This host's processes read so far, by pid: the sidecar reads the QP table every 30 s, each
/// process once.
static LIVE: Mutex<BTreeMap<u32, Read>> = Mutex::new(BTreeMap::new());

/// A process's start time (`/proc/<pid>/stat`'s 22nd field, in clock ticks since boot).
fn start_time(root: &Path, pid: u32) -> Option<u64> {
    let stat =
        std::fs::read_to_string(root.join("proc").join(pid.to_string()).join("stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces: fields count from its end.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The process (thread group) a thread `tid` is of, from `/proc/<tid>/status`.
fn tgid(root: &Path, tid: u32) -> Option<u32> {
    let status =
        std::fs::read_to_string(root.join("proc").join(tid.to_string()).join("status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

/// Fills each user QP's `job`. Live (`root` is `/`), a QP's pid (the kernel's RES_PID names
/// the thread that created it: NCCL's proxy threads create theirs) becomes its process's, and
/// each process is read once in this process's life; a copied tree's are read each time.
pub fn fill(root: &Path, qps: &mut [Qp]) {
    let live = root == Path::new("/");
    if live {
        for q in qps.iter_mut() {
            if let Some(t) = q.pid.and_then(|p| tgid(root, p)) {
                q.pid = Some(t);
            }
        }
    }
    let mut cache = if live {
        Some(
            LIVE.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    } else {
        None
    };
    let mut seen: HashMap<u32, Option<ProcessJob>> = HashMap::new();
    for q in qps.iter_mut() {
        let Some(pid) = q.pid else { continue };
        q.job = seen
            .entry(pid)
            .or_insert_with(|| match cache.as_deref_mut() {
                Some(cache) => {
                    let started = start_time(root, pid);
                    match cache.get(&pid) {
                        Some((s, job)) if started.is_some() && *s == started => job.clone(),
                        _ => {
                            let job = read(root, pid);
                            cache.insert(pid, (started, job.clone()));
                            job
                        }
                    }
                }
                None => read(root, pid),
            })
            .clone();
        if live && q.job.is_none() {
            // The kernel's table names it: ended since, or hidden from this process.
            q.job = Some(ProcessJob {
                unread: Some(format!(
                    "/proc/{pid}: not visible (the process ended, or /proc hides it from the observer: hidepid, ProtectProc)"
                )),
                ..ProcessJob::default()
            });
        }
    }
    if let Some(cache) = cache.as_deref_mut() {
        // Processes without QPs now are forgotten: the cache stays the size of the table.
        cache.retain(|pid, _| seen.contains_key(pid));
    }
}

/// A copied tree's process files for `job` (see [`read`]): the job variables alone, and a
/// cgroup line that gives back its pod and container.
pub fn tree_files(job: &ProcessJob) -> (Vec<u8>, Option<String>) {
    let mut environ = Vec::new();
    let mut put = |name: &str, value: String| {
        environ.extend_from_slice(name.as_bytes());
        environ.push(b'=');
        environ.extend_from_slice(value.as_bytes());
        environ.push(0);
    };
    match job.job.as_deref().and_then(|j| j.split_once(':')) {
        Some(("torchelastic", id)) => put("TORCHELASTIC_RUN_ID", id.into()),
        Some(("slurm", id)) => put("SLURM_JOB_ID", id.into()),
        Some(("torch", rest)) => {
            if let Some((a, p)) = rest.rsplit_once(':') {
                put("MASTER_ADDR", a.into());
                put("MASTER_PORT", p.into());
            }
        }
        _ => {}
    }
    for (name, v) in [
        ("RANK", job.rank),
        ("LOCAL_RANK", job.local_rank),
        ("WORLD_SIZE", job.world_size),
    ] {
        if let Some(v) = v {
            put(name, v.to_string());
        }
    }
    let cgroup = match (&job.pod, &job.container) {
        (None, None) => None,
        (pod, container) => {
            let mut path = "0::/kubepods".to_string();
            if let Some(p) = pod {
                path += &format!("/pod{p}");
            }
            if let Some(c) = container {
                path += &format!("/{c}");
            }
            Some(path + "\n")
        }
    };
    (environ, cgroup)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTAINER: &str = "4f1c8a2b9d3e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";

    #[test]
    fn only_the_job_variables_are_kept() {
        let environ = b"PATH=/usr/bin\0AWS_SECRET_ACCESS_KEY=hunter2\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=16\0TORCHELASTIC_RUN_ID=run-7\0MASTER_ADDR=198.18.0.1\0MASTER_PORT=29500\0NOEQUALS\0";
        let vars = job_variables(environ);
        assert!(vars.iter().all(|(n, _)| VARIABLES.contains(n)));
        assert!(!format!("{vars:?}").contains("hunter2"));
        let job = from_variables(&vars);
        assert_eq!(job.job.as_deref(), Some("torchelastic:run-7"));
        assert_eq!(
            (job.rank, job.local_rank, job.world_size),
            (Some(3), Some(1), Some(16))
        );
    }

    #[test]
    fn each_launcher_is_read() {
        let job = |e: &[u8]| from_variables(&job_variables(e));
        // torchrun with a static rendezvous: run id "none", the rendezvous names the job.
        let j = job(b"TORCHELASTIC_RUN_ID=none\0MASTER_ADDR=10.0.0.1\0MASTER_PORT=29500\0RANK=0\0");
        assert_eq!(j.job.as_deref(), Some("torch:10.0.0.1:29500"));
        // Slurm's srun alone.
        let j = job(b"SLURM_JOB_ID=4242\0SLURM_PROCID=5\0SLURM_LOCALID=1\0SLURM_NTASKS=8\0");
        assert_eq!(j.job.as_deref(), Some("slurm:4242"));
        assert_eq!(
            (j.rank, j.local_rank, j.world_size),
            (Some(5), Some(1), Some(8))
        );
        // mpirun (Open MPI) inside a Slurm allocation: MPI's rank, Slurm's job.
        let j = job(b"SLURM_JOB_ID=9\0SLURM_PROCID=0\0OMPI_COMM_WORLD_RANK=6\0OMPI_COMM_WORLD_LOCAL_RANK=2\0OMPI_COMM_WORLD_SIZE=32\0");
        assert_eq!(j.job.as_deref(), Some("slurm:9"));
        assert_eq!(
            (j.rank, j.local_rank, j.world_size),
            (Some(6), Some(2), Some(32))
        );
        // MPICH / Intel MPI; a rank that is no number is not one.
        let j = job(b"PMI_RANK=4\0PMI_SIZE=8\0MPI_LOCALRANKID=0\0RANK=x\0");
        assert_eq!(
            (j.rank, j.world_size, j.local_rank),
            (Some(4), Some(8), Some(0))
        );
        assert_eq!(j.job, None);
        assert!(job(b"HOME=/root\0").is_empty());
    }

    #[test]
    fn pods_and_containers_from_each_cgroup_layout() {
        let uid = "0c1a6e2f-5ad6-4c4f-9d5c-0b2f8e2d2c1a";
        // Kubernetes, cgroup v2, systemd driver (containerd).
        let systemd = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CONTAINER}.scope\n",
            uid.replace('-', "_")
        );
        assert_eq!(
            pod_and_container(&systemd),
            (Some(uid.into()), Some(CONTAINER.into()))
        );
        // Kubernetes, cgroup v1, cgroupfs driver: every controller's line.
        let cgroupfs = format!(
            "12:memory:/kubepods/besteffort/pod{uid}/{CONTAINER}\n11:cpu,cpuacct:/kubepods/besteffort/pod{uid}/{CONTAINER}\n"
        );
        assert_eq!(
            pod_and_container(&cgroupfs),
            (Some(uid.into()), Some(CONTAINER.into()))
        );
        // Docker and Podman alone.
        let docker = format!("0::/system.slice/docker-{CONTAINER}.scope\n");
        assert_eq!(pod_and_container(&docker), (None, Some(CONTAINER.into())));
        let podman = format!("0::/machine.slice/libpod-{CONTAINER}.scope/container\n");
        assert_eq!(pod_and_container(&podman), (None, Some(CONTAINER.into())));
        // A login session's process: neither.
        assert_eq!(
            pod_and_container("0::/user.slice/user-0.slice/session-3.scope\n"),
            (None, None)
        );
    }

    #[test]
    fn a_copied_trees_files_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        for job in [
            ProcessJob {
                job: Some("torch:198.18.0.1:29500".into()),
                rank: Some(3),
                local_rank: Some(1),
                world_size: Some(8),
                pod: Some("0c1a6e2f-5ad6-4c4f-9d5c-0b2f8e2d2c1a".into()),
                container: Some(CONTAINER.into()),
                unread: None,
            },
            ProcessJob {
                job: Some("slurm:77".into()),
                rank: Some(0),
                ..ProcessJob::default()
            },
        ] {
            let (environ, cgroup) = tree_files(&job);
            let d = dir.path().join("proc/41");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("environ"), environ).unwrap();
            let _ = std::fs::remove_file(d.join("cgroup"));
            if let Some(c) = cgroup {
                std::fs::write(d.join("cgroup"), c).unwrap();
            }
            assert_eq!(read(dir.path(), 41), Some(job));
        }
        assert_eq!(read(dir.path(), 42), None);
        // A process copied without its environment (it could not be read): not read, said so.
        std::fs::create_dir_all(dir.path().join("proc/43")).unwrap();
        let unread = read(dir.path(), 43).expect("the process is in the copy");
        assert!(unread.is_empty() && unread.unread.is_some(), "{unread:?}");
    }

    /// `sleep 30` with `env`, once its environment is in place: the parent may run on between
    /// the child's exec closing its descriptors and the kernel laying out its new stack.
    fn spawned(env: &[(&str, &str)]) -> std::process::Child {
        let child = std::process::Command::new("sleep")
            .arg("30")
            .envs(env.iter().copied())
            .spawn()
            .unwrap();
        let path = format!("/proc/{}/environ", child.id());
        let first = format!("{}={}", env[0].0, env[0].1);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !std::fs::read(&path)
            .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == first.as_bytes()))
        {
            assert!(std::time::Instant::now() < deadline, "{path}: no {first}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child
    }

    /// A user RC QP of `pid`, its job not read yet.
    fn rc_qp(pid: u32) -> Qp {
        Qp {
            device: "mlx5_0".into(),
            port: Some(1),
            lqpn: 1,
            rqpn: Some(2),
            qp_type: "RC".into(),
            state: "RTS".into(),
            pid: Some(pid),
            comm: None,
            job: None,
        }
    }

    /// The tests that fill live tables share the process's cache: one at a time.
    static LIVE_TESTS: Mutex<()> = Mutex::new(());

    /// This host's processes are read once: a second table of the same process gives what
    /// the first read, and a process gone is forgotten.
    #[test]
    fn a_live_process_is_read_once() {
        let _one = LIVE_TESTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut child = spawned(&[("SLURM_JOB_ID", "roce-once-11"), ("RANK", "2")]);
        let pid = child.id();
        assert!(start_time(Path::new("/"), pid).is_some());
        let qp = rc_qp(pid);
        let mut table = [qp.clone(), qp.clone()];
        fill(Path::new("/"), &mut table);
        let want = ProcessJob {
            job: Some("slurm:roce-once-11".into()),
            rank: Some(2),
            ..ProcessJob::default()
        };
        assert_eq!(table[0].job.as_ref(), Some(&want));
        assert_eq!(table[1].job.as_ref(), Some(&want));
        // Read once: a second table gives what the cache holds, not a new reading.
        let marked = ProcessJob {
            job: Some("from the cache".into()),
            ..ProcessJob::default()
        };
        LIVE.lock().unwrap().get_mut(&pid).expect("cached").1 = Some(marked.clone());
        let mut again = [qp.clone()];
        fill(Path::new("/"), &mut again);
        assert_eq!(again[0].job.as_ref(), Some(&marked));
        child.kill().unwrap();
        child.wait().unwrap();
        let mut table = [qp];
        fill(Path::new("/"), &mut table);
        // Gone: its start time unread, so it is read again, and it says so.
        let job = table[0].job.as_ref().expect("a reason");
        assert!(job.is_empty(), "{job:?}");
        assert!(
            job.unread
                .as_ref()
                .is_some_and(|u| u.contains("not visible")),
            "{job:?}"
        );
    }

    /// A QP created by a thread (NCCL's proxy threads create theirs) is its process's.
    #[test]
    fn a_threads_qp_is_its_processs() {
        let _one = LIVE_TESTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let me = std::process::id();
        assert_eq!(tgid(Path::new("/"), me), Some(me));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        assert_ne!(tid, me);
        assert_eq!(tgid(Path::new("/"), tid), Some(me));
        let mut table = [rc_qp(tid)];
        fill(Path::new("/"), &mut table);
        assert_eq!(table[0].pid, Some(me));
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }

    /// A real process's environment, read through the kernel's `/proc`.
    #[test]
    fn a_live_processs_environment_is_read() {
        let mut child = spawned(&[
            ("TORCHELASTIC_RUN_ID", "live-run"),
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "16"),
            ("API_TOKEN", "not-to-be-kept"),
        ]);
        let got = read(Path::new("/"), child.id());
        let mut gone = child.id();
        child.kill().unwrap();
        child.wait().unwrap();
        let got = got.expect("a live process");
        assert_eq!(got.job.as_deref(), Some("torchelastic:live-run"));
        assert_eq!(
            (got.rank, got.local_rank, got.world_size),
            (Some(5), Some(1), Some(16))
        );
        assert_eq!(got.unread, None);
        assert!(!format!("{got:?}").contains("not-to-be-kept"));
        // Gone: nothing to tell.
        while Path::new(&format!("/proc/{gone}")).exists() {
            gone += 1;
        }
        assert_eq!(read(Path::new("/"), gone), None);
    }
}
