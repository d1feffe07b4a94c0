//! Shared pieces of Rill's scenario benches: running the embedded broker as
//! its own process (so its memory and CPU are measured apart from the
//! harness), reading a process's peak RSS and CPU time from `/proc`, and
//! the statistics the benchmarking notes ask for (medians of A/B rounds and
//! of their pairwise ratios, with min and max).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use plotters::prelude::*;
use rill_broker::EmbeddedCluster;

/// Environment variable that turns a bench binary into a broker process.
pub const SERVE_BROKER_ENV: &str = "RILL_BENCH_SERVE_BROKER";

/// If this process was started as a broker (see [`spawn_broker_process`]),
/// runs the embedded broker until stdin closes, then exits. Call first in
/// a bench's `main`.
pub fn serve_broker_if_requested() {
    let Some(dir) = std::env::var_os(SERVE_BROKER_ENV) else {
        return;
    };
    // RUST_LOG as the parent set it; standard error goes to the parent.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let cluster = EmbeddedCluster::builder()
            .data_dir(Path::new(&dir))
            .start()
            .await
            .expect("broker starts");
        println!("{}", cluster.bootstrap_servers());
        // Serve until the parent closes our stdin (or dies).
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await
        .unwrap();
        cluster.shutdown().await;
    });
    std::process::exit(0);
}

/// The embedded broker in a child process of this bench binary.
pub struct BrokerProcess {
    pub child: Child,
    pub bootstrap: String,
    _dir: tempfile::TempDir,
    /// Its log lines about streams groups' target assignments (the rest
    /// of its log, warnings and errors, goes to this process's stderr).
    assignments: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// What the embedded broker logs when it computes a KIP-1071 streams
/// group's target assignment (with `members` and `assign_us`).
pub const STREAMS_ASSIGNMENT_LINE: &str = "computed the target assignment";

impl BrokerProcess {
    /// The broker's "computed the target assignment" lines so far.
    pub fn streams_assignments(&self) -> Vec<String> {
        self.assignments
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

pub fn spawn_broker_process() -> BrokerProcess {
    let dir = tempfile::Builder::new()
        .prefix("rill-bench-broker-")
        .tempdir()
        .unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(SERVE_BROKER_ENV, dir.path())
        .env("RUST_LOG", "warn,rill_broker::coordinator::streams=info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("broker process starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let assignments = std::sync::Arc::<std::sync::Mutex<Vec<String>>>::default();
    let err = child.stderr.take().expect("piped");
    let kept = assignments.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains(STREAMS_ASSIGNMENT_LINE) {
                kept.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            } else if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("{line}");
            }
        }
    });
    BrokerProcess {
        child,
        bootstrap: line.trim().to_string(),
        _dir: dir,
        assignments,
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Peak resident set size (VmHWM) of a process, in KiB.
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmHWM:")
}

/// Current resident set size (VmRSS) of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS:")
}

fn status_field(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Threads of a process (`Threads:` in `/proc/<pid>/status`).
pub fn thread_count(pid: u32) -> u64 {
    status_field(pid, "Threads:")
}

/// Open file descriptors of a process (entries of `/proc/<pid>/fd`).
pub fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// User + system CPU seconds a process has used so far.
#[allow(unsafe_code)] // sysconf(3), see SAFETY below
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / clock_ticks_per_second()
}

/// The kernel's clock ticks per second, the unit of `/proc` CPU times.
#[allow(unsafe_code)] // sysconf(3), see SAFETY below
fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    hz.max(1.0)
}

/// Busy CPU seconds of the whole machine so far, summed over its cores
/// (`/proc/stat`: everything but idle and iowait): with [`cpu_seconds`] of
/// the app and the broker it shows whether a run was bound by the cores.
pub fn machine_busy_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return f64::NAN;
    };
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return f64::NAN;
    };
    // user nice system idle iowait irq softirq steal (guest time is in user).
    let f: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    if f.len() < 8 {
        return f64::NAN;
    }
    let busy = f.iter().sum::<f64>() - f[3] - f[4];
    busy / clock_ticks_per_second()
}

/// The first child process of `pid` (the JVM under Kafka's guard shell).
pub fn first_child(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return f64::NAN;
    }
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// (median, min, max) of `v`.
pub fn spread(v: &[f64]) -> (f64, f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(v), min, max)
}

/// (median, min, max) of pairwise ratios `a[i] / b[i]`.
pub fn ratio_stats(a: &[f64], b: &[f64]) -> (f64, f64, f64) {
    let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    spread(&r)
}

/// One line of machine and version facts for reports.
pub fn machine_summary() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    let java = Command::new("java")
        .arg("-version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "{cores} cores, {} GiB RAM; {java}; rill commit {commit}",
        mem_kib / 1024 / 1024
    )
}

/// Builds `rill-streams-app` (tests/src/bin) in release and returns its path
/// next to the running bench binary. `RILL_BENCH_APP=<path>` runs that
/// binary instead, unbuilt (comparing two Rill builds: one invocation each,
/// alternated).
pub fn streams_app_binary() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("RILL_BENCH_APP") {
        let path = std::path::PathBuf::from(path);
        assert!(
            path.is_file(),
            "RILL_BENCH_APP: {} is not a file",
            path.display()
        );
        return path;
    }
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(rill_tests::backend::repo_root())
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "rill-tests",
            "--bin",
            "rill-streams-app",
        ])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building rill-streams-app failed");
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("rill-streams-app")
}

/// `k` from the environment, parsed, else `d`.
pub fn env_or<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// A producer for loading inputs (20 ms linger, 256 KiB batches).
pub fn load_producer(bootstrap: &str) -> rill_client::Producer {
    rill_client::Producer::new(
        &rill_client::ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("linger.ms", "20")
            .set("batch.size", "262144"),
    )
    .expect("producer")
}

/// Sends every record, waiting for acknowledgements every 50,000 sends and
/// at the end (load generators: bounded memory, nothing left unsent).
pub fn send_all(
    p: &rill_client::Producer,
    records: impl IntoIterator<Item = rill_client::ProducerRecord>,
) {
    let mut pending = Vec::new();
    for r in records {
        pending.push(p.send(r).expect("send"));
        if pending.len() >= 50_000 {
            for f in pending.drain(..) {
                f.wait().expect("load");
            }
        }
    }
    p.flush().expect("flush");
    for f in pending {
        f.wait().expect("load");
    }
}

/// A child's stdout, line by line, on a channel (read on its own thread).
pub fn lines_of(child: &mut Child) -> crossbeam_channel::Receiver<String> {
    let stdout = child.stdout.take().expect("the child's stdout is piped");
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            let _ = tx.send(l);
        }
    });
    rx
}

/// Waits until an app prints `RUNNING` (panics naming `label` after
/// `within`): the changelog records its `RESTORED <n>` lines add up to, and
/// the REST address a Rill app prints first (`REST <host:port>`).
pub fn await_running_rest(
    rx: &crossbeam_channel::Receiver<String>,
    within: std::time::Duration,
    label: &str,
) -> (u64, Option<String>) {
    let deadline = std::time::Instant::now() + within;
    let (mut restored, mut rest) = (0, None);
    loop {
        let l = rx
            .recv_deadline(deadline)
            .unwrap_or_else(|_| panic!("{label}: the app never printed RUNNING"));
        if l == "RUNNING" {
            return (restored, rest);
        }
        if let Some(n) = l.strip_prefix("RESTORED ") {
            restored += n.trim().parse::<u64>().unwrap_or(0);
        }
        if let Some(a) = l.strip_prefix("REST ") {
            rest = Some(a.trim().to_string());
        }
    }
}

/// Seconds spent committing and commits made so far by all of a Rill app's
/// stream threads (the `rill_streams_commit_latency_seconds` histogram's
/// sum and count in its `/metrics`); `None` if it cannot be read.
pub fn commit_totals(rest: &str) -> Option<(f64, f64)> {
    let text = ureq::get(&format!("http://{rest}/metrics"))
        .timeout(std::time::Duration::from_secs(5))
        .call()
        .ok()?
        .into_string()
        .ok()?;
    let total = |name: &str| -> f64 {
        text.lines()
            .filter_map(|l| l.strip_prefix(name))
            .filter(|rest| rest.starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Some((
        total("rill_streams_commit_latency_seconds_sum"),
        total("rill_streams_commit_latency_seconds_count"),
    ))
}

/// The sum of the end offsets of `topic`'s partitions `0..partitions` (0 on error).
pub fn total_end_offset(admin: &rill_client::Admin, topic: &str, partitions: i32) -> i64 {
    use rill_client::OffsetSpec;
    use rill_client::TopicPartition;
    let want: std::collections::BTreeMap<TopicPartition, OffsetSpec> = (0..partitions)
        .map(|p| (TopicPartition::new(topic, p), OffsetSpec::Latest))
        .collect();
    admin
        .list_offsets(&want)
        .map(|m| m.values().map(|o| o.offset).sum())
        .unwrap_or(0)
}

/// Counting instructions instead of seconds (`RILL_BENCH_CALLGRIND=<dir>`):
/// the app runs under `valgrind --tool=callgrind`, which counts every
/// instruction of the process from start to exit. Instruction counts repeat
/// for the same binary and input whatever else the machine does, where
/// CPU-seconds on a shared two-core machine vary by ±30 %; they are how two
/// builds' per-record cost is compared (`callgrind_annotate` on the files
/// shows where they differ). Only whole runs compare: a window between two
/// committed offsets holds a different share of each sub-topology's work
/// in each run.
pub struct Callgrind {
    dir: String,
}

impl Callgrind {
    /// `Some` when `RILL_BENCH_CALLGRIND` names a directory.
    pub fn requested() -> Option<Self> {
        std::env::var("RILL_BENCH_CALLGRIND")
            .ok()
            .map(|dir| Self { dir })
    }

    /// The counts of the run tagged `tag`.
    fn file(&self, tag: &str) -> String {
        format!("{}/callgrind-{tag}.out", self.dir)
    }

    /// `bin` wrapped in callgrind, its counts into `<dir>/callgrind-<tag>.out`.
    pub fn command(&self, bin: &std::path::Path, tag: &str) -> Command {
        let mut c = Command::new("valgrind");
        c.args(["--tool=callgrind", "--quiet"])
            .arg(format!("--callgrind-out-file={}", self.file(tag)))
            .arg(bin);
        c
    }

    /// What run `b`'s code would spend on run `a`'s work over what `a`
    /// spent (benches/python/callgrind_compare.py: each function's cost per
    /// call in `b` weighed by its calls in `a`).
    pub fn compare(&self, a: &str, b: &str) -> f64 {
        let script = rill_tests::backend::repo_root().join("benches/python/callgrind_compare.py");
        let out = Command::new("python3")
            .arg(script)
            .arg(self.file(a))
            .arg(self.file(b))
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "callgrind_compare.py {a} {b}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("callgrind_compare.py prints JSON");
        v["ratio"].as_f64().expect("a ratio")
    }

    /// The instructions counted in `<dir>/callgrind-<tag>.out` (its `totals:`
    /// line; the file is written when the process ends).
    pub fn instructions(&self, tag: &str) -> u64 {
        let path = self.file(tag);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        text.lines()
            .find_map(|l| l.strip_prefix("totals:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{path}: no totals line"))
    }
}

/// A `perf record` of one process, running while the value lives (perf
/// writes its file when the value drops: SIGINT, then wait). Profiling aid
/// for the scenario benches.
pub struct PerfRecord(Child);

impl PerfRecord {
    /// When `RILL_BENCH_PERF=<dir>` is set: `perf record` of `pid` with call
    /// graphs into `<dir>/perf-<tag>.data`; `RILL_BENCH_PERF_CALL_GRAPH`
    /// (e.g. `dwarf,8192`) picks the unwinder (default: frame pointers),
    /// `RILL_BENCH_PERF_FREQ` the sampling rate (default 499 Hz; dwarf
    /// copies the stack per sample, so long runs want ~99).
    pub fn start_if_requested(pid: u32, tag: &str) -> Option<Self> {
        let dir = std::env::var("RILL_BENCH_PERF").ok()?;
        let call_graph =
            std::env::var("RILL_BENCH_PERF_CALL_GRAPH").unwrap_or_else(|_| "fp".into());
        let freq = std::env::var("RILL_BENCH_PERF_FREQ").unwrap_or_else(|_| "499".into());
        let child = Command::new("perf")
            .args(["record", "-F", &freq, "--call-graph", &call_graph])
            .args(["-p", &pid.to_string(), "-o"])
            .arg(format!("{dir}/perf-{tag}.data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("perf starts (RILL_BENCH_PERF is set)");
        Some(Self(child))
    }
}

impl Drop for PerfRecord {
    fn drop(&mut self) {
        rill_tests::send_signal(self.0.id(), libc::SIGINT);
        let _ = self.0.wait();
    }
}

// ------------------------------------------------------------------- charts

const COLORS: [RGBColor; 3] = [
    RGBColor(54, 102, 204),
    RGBColor(230, 120, 40),
    RGBColor(60, 160, 90),
];

/// Draws one bar per (label, series) with its value on top.
fn draw_bars<Y>(
    chart: &mut ChartContext<
        '_,
        BitMapBackend<'_>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, Y>,
    >,
    labels: &[&str],
    series: &[(&str, Vec<f64>)],
    log: bool,
    k: f64,
) where
    Y: Ranged<ValueType = f64>,
{
    let floor = if log { 1.0 } else { 0.0 };
    let groups = series.first().map_or(0, |(_, v)| v.len());
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0f64, f64::max);
    chart
        .draw_series((0..groups).map(|i| {
            let tallest = series.iter().map(|(_, v)| v[i]).fold(1.0f64, f64::max);
            let y = if log {
                tallest * 2.2
            } else {
                tallest + top * 0.08
            };
            Text::new(
                labels[i].to_string(),
                (i as f64 + 0.12, y),
                ("sans-serif", 15),
            )
        }))
        .unwrap();
    for (si, (name, vals)) in series.iter().enumerate() {
        let c = COLORS[si % COLORS.len()];
        chart
            .draw_series(vals.iter().enumerate().map(|(i, v)| {
                let x0 = i as f64 + 0.1 + si as f64 * 0.8 / k;
                Rectangle::new([(x0, floor), (x0 + 0.8 / k, v.max(1.0))], c.filled())
            }))
            .unwrap()
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
        chart
            .draw_series(vals.iter().enumerate().map(|(i, v)| {
                let x = i as f64 + 0.1 + (si as f64 + 0.3) * 0.8 / k;
                Text::new(
                    format!("{v:.0}"),
                    (x, v.max(1.0) * if log { 1.15 } else { 1.02 }),
                    ("sans-serif", 13),
                )
            }))
            .unwrap();
    }
}

/// A white 1000 × 520 PNG at `path` (its directory created), with DejaVu
/// Sans registered as the charts' "sans-serif".
fn canvas(path: &Path) -> DrawingArea<BitMapBackend<'_>, plotters::coord::Shift> {
    let font = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
        .expect("DejaVu Sans for the chart labels (apt-get install fonts-dejavu-core)");
    let _ = plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    );
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let root = BitMapBackend::new(path, (1000, 520)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    root
}

/// Grouped bars, one group per label, one bar per series.
pub fn bar_chart(
    path: &Path,
    title: &str,
    labels: &[&str],
    series: &[(&str, Vec<f64>)],
    log: bool,
) {
    let root = canvas(path);
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0f64, f64::max)
        * if log { 4.0 } else { 1.25 };
    let n = labels.len();
    let k = series.len() as f64;
    let k = k.max(1.0);
    let caption = (title, ("sans-serif", 20));
    if log {
        let mut chart = ChartBuilder::on(&root)
            .caption(caption.0, caption.1)
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n as f64, (1.0..max).log_scale())
            .unwrap();
        chart
            .configure_mesh()
            .x_labels(0)
            .disable_x_mesh()
            .draw()
            .unwrap();
        draw_bars(&mut chart, labels, series, log, k);
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .unwrap();
    } else {
        let mut chart = ChartBuilder::on(&root)
            .caption(caption.0, caption.1)
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..n as f64, 0.0..max)
            .unwrap();
        chart
            .configure_mesh()
            .x_labels(0)
            .disable_x_mesh()
            .draw()
            .unwrap();
        draw_bars(&mut chart, labels, series, log, k);
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .unwrap();
    }
    root.present().unwrap();
}

/// One line per series over log-scaled x values (e.g. partition counts),
/// log-scaled y when `log_y`; each point labelled with its value.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
    log_y: bool,
) {
    let root = canvas(path);
    let points = || series.iter().flat_map(|(_, v)| v.iter().copied());
    let (x_lo, x_hi) = points().fold((f64::INFINITY, 1.0f64), |(l, h), (x, _)| {
        (l.min(x), h.max(x))
    });
    let y_hi = points().fold(1.0f64, |m, (_, y)| m.max(y));
    let x_range = (x_lo.max(1.0) / 1.5..x_hi * 1.5).log_scale();
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80);
    if log_y {
        let mut chart = builder
            .build_cartesian_2d(x_range, (1.0..y_hi * 3.0).log_scale())
            .unwrap();
        chart.configure_mesh().x_desc(x_label).draw().unwrap();
        draw_lines(&mut chart, series);
    } else {
        let mut chart = builder
            .build_cartesian_2d(x_range, 0.0..y_hi * 1.2)
            .unwrap();
        chart.configure_mesh().x_desc(x_label).draw().unwrap();
        draw_lines(&mut chart, series);
    }
    root.present().unwrap();
}

fn draw_lines<'a, X, Y>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    series: &[(&str, Vec<(f64, f64)>)],
) where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    // Eight distinct colours (the many-tasks chart draws 8 series: 4
    // workloads × 2 apps): the bars' three, then red, purple, brown, pink
    // and grey as in matplotlib's `tab10`.
    let colors = [
        COLORS[0],
        COLORS[1],
        COLORS[2],
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    for (si, (name, points)) in series.iter().enumerate() {
        let c = colors[si % colors.len()];
        chart
            .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
            .unwrap()
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c.stroke_width(2)));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, c.filled())),
            )
            .unwrap();
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, y)| Text::new(format!("{y:.0}"), (x, y), ("sans-serif", 12))),
            )
            .unwrap();
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()
        .unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(
            ratio_stats(&[2.0, 4.0, 9.0], &[1.0, 2.0, 3.0]),
            (2.0, 2.0, 3.0)
        );
    }

    #[test]
    fn reads_own_process_stats() {
        let me = std::process::id();
        assert!(peak_rss_kib(me) > 0);
        assert!(rss_kib(me) > 0);
        assert!(cpu_seconds(me) >= 0.0);
        // The machine has been up and busy for a while, and its busy time
        // only grows.
        let busy = machine_busy_seconds();
        assert!(busy.is_finite() && busy > 0.0, "{busy}");
        assert!(machine_busy_seconds() >= busy);
    }
}
