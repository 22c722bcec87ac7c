//! The cluster examples run unchanged on one machine: `examples/slurm/*.sbatch` with
//! `SLURM_ARRAY_TASK_ID` set by hand, and the commands of `examples/kubernetes/*-job.yaml` with
//! `JOB_COMPLETION_INDEX` set by hand; both end in a merged COLMAP database that COLMAP's mapper
//! reconstructs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// `DATA` with four fountain images in `DATA/images`.
fn data_folder(data: &Path, dir: &Path) -> PathBuf {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    for i in 0..4 {
        let name = format!("{i:04}.jpg");
        std::os::unix::fs::symlink(
            data.join("strecha/fountain-P11/images").join(&name),
            images.join(&name),
        )
        .unwrap();
    }
    dir.to_path_buf()
}

/// A shell command with descl first on PATH and the examples' settings.
fn shell(program: &str, dir: &Path) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_descl")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(program);
    c.env("PATH", path)
        .env("DATA", dir)
        .env("NEIGHBOURS", "2")
        .env("DESCL_EXTRACT_ARGS", "--max-keypoints 512");
    c
}

fn check(c: &mut Command, what: &str) {
    let (ok, _, err) = common::run(c);
    assert!(ok, "{what}: {err}");
}

/// The database has the four images and verified pairs, and the mapper registered images.
fn check_outputs(dir: &Path) {
    let images = common::db_rows(&dir.join("database.db"), "images", "name");
    assert_eq!(images.len(), 4, "{images:?}");
    assert!(
        !common::db_rows(&dir.join("database.db"), "two_view_geometries", "pair_id").is_empty()
    );
    assert!(
        dir.join("sparse/0/images.bin").is_file(),
        "no model in {}",
        dir.display()
    );
}

#[test]
fn slurm_scripts_run_unchanged() {
    let Some(data) = common::data_root_or_skip("slurm_scripts_run_unchanged") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = data_folder(&data, tmp.path());
    let script = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/slurm")
            .join(name)
    };
    const SHARDS: usize = 2;
    for stage in [
        "extract.sbatch",
        "pairs.sbatch",
        "match.sbatch",
        "merge.sbatch",
    ] {
        let array = matches!(stage, "extract.sbatch" | "match.sbatch");
        for task in 0..if array { SHARDS } else { 1 } {
            let mut c = shell("bash", &dir);
            c.arg(script(stage)).env("SHARDS", SHARDS.to_string());
            if array {
                c.env("SLURM_ARRAY_TASK_ID", task.to_string());
            }
            check(&mut c, stage);
        }
    }
    check_outputs(&dir);
}

/// The container script of a manifest (the block under `args: - |`) and its `SHARDS` value.
fn manifest_script(path: &Path) -> (String, Option<usize>) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| l.trim() == "- |").unwrap() + 1;
    let indent = lines[start].len() - lines[start].trim_start().len();
    let script: Vec<&str> = lines[start..]
        .iter()
        .take_while(|l| l.len() > indent && l[..indent].trim().is_empty())
        .map(|l| &l[indent..])
        .collect();
    let shards = lines
        .iter()
        .find(|l| l.contains("name: SHARDS"))
        .and_then(|l| l.split('"').nth(1))
        .map(|v| v.parse().unwrap());
    (script.join("\n"), shards)
}

#[test]
fn kubernetes_job_commands_run_unchanged() {
    let Some(data) = common::data_root_or_skip("kubernetes_job_commands_run_unchanged") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = data_folder(&data, tmp.path());
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kubernetes");
    for job in ["extract", "pairs", "match", "merge"] {
        let (script, shards) = manifest_script(&manifests.join(format!("{job}-job.yaml")));
        assert!(script.contains("descl"), "{job}: {script}");
        for index in 0..shards.unwrap_or(1) {
            let mut c = shell("sh", &dir);
            c.args(["-c", &script]);
            if let Some(n) = shards {
                c.env("SHARDS", n.to_string())
                    .env("JOB_COMPLETION_INDEX", index.to_string());
            }
            check(&mut c, job);
        }
    }
    check_outputs(&dir);
}

/// A one-node Slurm cluster of this machine's own daemons (Debian's `slurm-wlm` and `munge`,
/// installed by scripts/setup), configured in a temporary folder: its own munge key and socket,
/// its own ports, state and logs, so nothing of a system installation is read or changed. The
/// node declares 16 CPUs and 32 GB (`SlurmdParameters=config_overrides`) so that the examples'
/// `#SBATCH` requests are accepted as written; jobs whose dependency can never be met are
/// cancelled (`kill_invalid_depend`) instead of waiting forever. Every daemon is a child of
/// the test, killed when the cluster is dropped (also when the test fails).
struct SlurmCluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<std::process::Child>,
}

/// Whether every program the cluster needs is on PATH.
fn slurm_installed() -> bool {
    ["munged", "slurmctld", "slurmd", "sbatch", "squeue"]
        .iter()
        .all(|p| {
            Command::new("sh")
                .args(["-c", &format!("command -v {p}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// A TCP port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl SlurmCluster {
    fn start(dir: &Path) -> SlurmCluster {
        use std::os::unix::fs::PermissionsExt;
        let dir = dir.to_path_buf();
        for d in ["munge", "state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let munge = dir.join("munge");
        std::fs::set_permissions(&munge, std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = munge.join("munge.key");
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(std::fs::File::open("/dev/urandom").unwrap(), 1024),
            &mut bytes,
        )
        .unwrap();
        std::fs::write(&key, bytes).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let socket = munge.join("socket");
        let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=descl-test\nSlurmctldHost={host}(127.0.0.1)\n\
                 SlurmctldPort={}\nSlurmdPort={}\nSlurmUser=root\nSlurmdUser=root\n\
                 AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={}\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n\
                 MpiDefault=none\nSchedulerType=sched/builtin\n\
                 SchedulerParameters=kill_invalid_depend\nSelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_CPU\nSlurmdParameters=config_overrides\n\
                 ReturnToService=2\nMinJobAge=3600\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs=16 RealMemory=32768 State=UNKNOWN\n\
                 PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                free_port(),
                free_port(),
                socket.display()
            ),
        )
        .unwrap();
        let mut cluster = SlurmCluster {
            dir: dir.clone(),
            conf: conf.clone(),
            daemons: Vec::new(),
        };
        let at = |flag: &str, p: &Path| format!("--{flag}={}", p.display());
        cluster.spawn(
            "munged",
            &[
                "--foreground".into(),
                "--force".into(),
                at("key-file", &key),
                at("socket", &socket),
                at("pid-file", &munge.join("pid")),
                at("log-file", &munge.join("log")),
                at("seed-file", &munge.join("seed")),
            ],
        );
        cluster.wait_for("munge's socket", || socket.exists());
        let daemon_args = ["-D".into(), "-f".into(), conf.display().to_string()];
        cluster.spawn("slurmctld", &daemon_args);
        cluster.spawn("slurmd", &daemon_args);
        cluster.wait_for("the node to be idle", || {
            cluster
                .command("sinfo")
                .args(["-h", "-o", "%t"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        cluster
    }

    /// Starts a daemon of this cluster in the foreground, a child killed on drop.
    fn spawn(&mut self, program: &str, args: &[String]) {
        let child = self
            .command(program)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        self.daemons.push(child);
    }

    /// A client command of this cluster (`SLURM_CONF` set).
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    fn wait_for(&self, what: &str, ready: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !ready() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(60),
                "Slurm cluster: timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// Every job the controller knows of, `(id, state)`, completed ones included, each array
    /// task on its own (`-r`).
    fn jobs(&self) -> Vec<(String, String)> {
        let out = self
            .command("squeue")
            .args(["-h", "-r", "-t", "all", "-o", "%i %T"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(i, s)| (i.to_string(), s.to_string()))
            .collect()
    }

    fn logs(&self) -> String {
        ["log/slurmctld.log", "log/slurmd.log", "munge/log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!(
                    "--- {f}\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        for d in self.daemons.iter_mut().rev() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// `examples/slurm/submit.sh`, unchanged, under a real Slurm scheduler: a job array of extract
/// tasks, the pairs job after them, a match array after that and the merge + mapper job last,
/// each started by the scheduler through `afterok` dependencies. Every job completes, and the
/// merged database equals, table by table, the one `descl sfm` writes for the same images,
/// keypoints and retrieval pairs.
#[test]
fn slurm_submit_runs_on_a_one_node_cluster() {
    let Some(data) = common::data_root_or_skip("slurm_submit_runs_on_a_one_node_cluster") else {
        return;
    };
    if !common::colmap_or_skip("slurm_submit_runs_on_a_one_node_cluster") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !(root && slurm_installed()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "Slurm's daemons need root and slurm-wlm + munge (scripts/setup installs them)"
        );
        eprintln!("slurm_submit_runs_on_a_one_node_cluster: skipped (needs root and slurm-wlm)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = data_folder(&data, &tmp.path().join("data"));
    let cluster = SlurmCluster::start(&tmp.path().join("slurm"));
    // The examples folder copied as it is (sbatch writes its job logs where it is submitted).
    let examples = tmp.path().join("examples");
    std::fs::create_dir(&examples).unwrap();
    for e in
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/slurm")).unwrap()
    {
        let e = e.unwrap();
        std::fs::copy(e.path(), examples.join(e.file_name())).unwrap();
    }
    let mut submit = shell("bash", &dir);
    submit
        .arg(examples.join("submit.sh"))
        .env("SHARDS", "2")
        .env("SLURM_CONF", &cluster.conf);
    check(&mut submit, "submit.sh");
    let jobs = cluster.jobs();
    // 2 extract tasks, pairs, 2 match tasks, merge.
    assert_eq!(jobs.len(), 6, "{jobs:?}");
    let start = std::time::Instant::now();
    let finished = |s: &str| !matches!(s, "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING");
    loop {
        let jobs = cluster.jobs();
        if jobs.iter().all(|(_, s)| finished(s)) {
            let logs: String = std::fs::read_dir(&examples)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("slurm-"))
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                .collect();
            assert!(
                jobs.iter().all(|(_, s)| s == "COMPLETED"),
                "{jobs:?}\n{logs}\n{}",
                cluster.logs()
            );
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(600),
            "jobs still running after 10 minutes: {jobs:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    check_outputs(&dir);

    // descl sfm on the same images with the same settings: the examples' extraction preset
    // (descl sfm's defaults) and keypoints, and the same retrieval pairs.
    let full = tmp.path().join("full.db");
    let mut sfm = shell("descl", &dir);
    sfm.arg("sfm")
        .arg(dir.join("images"))
        .arg("--database")
        .arg(&full)
        .args(["--max-keypoints", "512", "--retrieval", "2"]);
    check(&mut sfm, "descl sfm");
    common::assert_same_databases(&dir.join("database.db"), &full);
}
