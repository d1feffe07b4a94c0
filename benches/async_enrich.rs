//! Async processing (issue 48): an I/O-bound topology side by side.
//!
//! 1. `enrich`: each record's value is looked up in a service (an HTTP
//!    server in this process on loopback, answering `GET /lookup/<value>`
//!    after `SERVICE_MS` (5) ms) and replaced by the answer. Three apps on
//!    the same pre-loaded input, one instance of 2 stream threads each,
//!    `commit.interval.ms` 1000, at-least-once:
//!    - Rill async: `try_map_values_async` with reqwest's async client
//!      (`async.max.inflight.per.task` 64, `.per.thread` 256: the defaults);
//!    - Rill sync: `try_map_values` with reqwest's blocking client (the stream
//!      thread waits for each answer);
//!    - Kafka Streams (Java): `mapValues` with `java.net.http.HttpClient.send`
//!      (blocking, the same service) — tests/java/StreamsApp.java `enrich`.
//!
//!    Each run reads the input from the start with its own application id;
//!    after its first output, `WARM_SECS` (10) s of warm-up, then the rate
//!    and CPU are measured over `MEASURE_SECS` (20) s of steady state from
//!    the output's end offsets. `ROUNDS` (5) rounds, the apps' order rotated
//!    each round; medians (min–max) and pairwise ratios against Kafka
//!    Streams. Chart: docs/img/async-enrich.png.
//! 2. `wordcount`: what async machinery costs when a topology has no async
//!    node — the cached word count (`WC_LINES` 4,500,000 lines of 10 words),
//!    this build against `BASELINE_APP` (a `rill-streams-app` built from the
//!    commit before async processing), alternated `ROUNDS` times: lines/s
//!    and lines per CPU-second between 20 % and 80 % of the input's
//!    committed offsets. Skipped, saying so, without `BASELINE_APP`.
//!
//! Command: `cargo bench -p rill-benches --bench async_enrich` (Java 17 and
//! the Kafka jars as for the other benches; `BROKERS=kafka,embedded` picks
//! brokers, Apache Kafka by default; `PARTS=enrich,wordcount`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rill_benches::{
    bar_chart, cpu_seconds, env_or, lines_of, load_producer, machine_summary, median, peak_rss_kib,
    ratio_stats, send_all, spawn_broker_process, spread, total_end_offset, Callgrind,
};
use rill_client::{Admin, ClientConfig, ProducerRecord, TopicPartition};
use rill_tests::backend::{repo_root, ApacheKafka, KAFKA_VERSION};
use rill_tests::client_scenarios::{admin, create_topic};
use rill_tests::rolling::{app_command, Runtime};

const PARTITIONS: i32 = 6;

/// A fresh topic of `PARTITIONS` partitions named after `name`.
fn topic(bootstrap: &str, name: &str) -> String {
    let t = rill_tests::unique_topic(name);
    create_topic(bootstrap, &t, PARTITIONS);
    t
}

/// The lookup service: `GET /lookup/<value>` answers `enriched-<value>`
/// after `delay`, on its own two-thread runtime; the requests it answered.
fn start_service(delay: Duration) -> (String, Arc<AtomicU64>, tokio::runtime::Runtime) {
    use axum::extract::Path as UrlPath;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lookup-service")
        .enable_all()
        .build()
        .unwrap();
    let served = Arc::new(AtomicU64::new(0));
    let count = served.clone();
    let app = axum::Router::new().route(
        "/lookup/{value}",
        axum::routing::get(move |UrlPath(v): UrlPath<String>| {
            let count = count.clone();
            async move {
                tokio::time::sleep(delay).await;
                count.fetch_add(1, Ordering::Relaxed);
                format!("enriched-{v}")
            }
        }),
    );
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, app).await });
    (url, served, rt)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum App {
    RillAsync,
    RillSync,
    KafkaStreams,
    /// `BASELINE_APP`'s binary (part 2).
    Baseline,
    /// This build's binary, for part 2.
    Rill,
}

impl App {
    fn label(self) -> &'static str {
        match self {
            App::RillAsync => "Rill async",
            App::RillSync => "Rill sync",
            App::KafkaStreams => "Kafka Streams",
            App::Baseline => "Rill before async",
            App::Rill => "Rill with async",
        }
    }
}

struct Running {
    child: Child,
    pid: u32,
    application_id: String,
    /// How long `stop` waits before killing (callgrind writes its counts
    /// only on a clean exit, slowly).
    patience: Duration,
}

impl Running {
    fn stop(mut self) {
        rill_tests::send_signal(self.pid, libc::SIGTERM);
        let deadline = Instant::now() + self.patience;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What every run of a part shares: the apps' binaries, the broker and
/// the lookup service.
struct Launch<'a> {
    bin: &'a Path,
    baseline: Option<&'a Path>,
    bootstrap: &'a str,
    service: &'a str,
}

/// Starts `app` reading `input` into `output`; waits for RUNNING. With
/// `callgrind`, a Rill app runs under it, its counts tagged with the name.
fn spawn(
    l: &Launch<'_>,
    app: App,
    input: &str,
    output: &str,
    topology: &str,
    dir: &Path,
    callgrind: Option<(&Callgrind, &str)>,
) -> Running {
    let (bin, baseline, bootstrap, service) = (l.bin, l.baseline, l.bootstrap, l.service);
    let rill = match app {
        App::KafkaStreams => None,
        App::Baseline => Some(baseline.expect("BASELINE_APP")),
        _ => Some(bin),
    };
    let mut cmd = match (rill, callgrind) {
        (None, _) => app_command(Runtime::KafkaStreams, bin),
        (Some(b), Some((cg, tag))) => cg.command(b, tag),
        (Some(b), None) => Command::new(b),
    };
    // Valgrind reads the binary's debug information first: minutes.
    let patience = Duration::from_secs(if callgrind.is_some() { 900 } else { 15 });
    let topology = match app {
        App::RillAsync => "enrich-async",
        App::RillSync => "enrich-sync",
        App::KafkaStreams => "enrich",
        App::Baseline | App::Rill => topology,
    };
    let application_id = format!("bench-{}", uuid::Uuid::new_v4().simple());
    cmd.args([
        "--bootstrap",
        bootstrap,
        "--application-id",
        &application_id,
        "--input",
        input,
        "--output",
        output,
        "--state-dir",
        &dir.display().to_string(),
        "--threads",
        "2",
        "--commit-ms",
        "1000",
        "--topology",
        topology,
        "--service",
        service,
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("the app starts");
    let pid = child.id();
    let lines = lines_of(&mut child);
    let deadline = Instant::now() + Duration::from_secs(120) + patience;
    loop {
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(l) if l.starts_with("RUNNING") => break,
            _ => assert!(
                Instant::now() < deadline,
                "{} did not reach RUNNING",
                app.label()
            ),
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Running {
        child,
        pid,
        application_id,
        patience,
    }
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    rate: f64,
    per_cpu: f64,
    rss_mib: f64,
}

/// Part 1: one run of `app` — first output, warm-up, then the measured window.
fn enrich_run(l: &Launch<'_>, app: App, input: &str) -> Sample {
    let bootstrap = l.bootstrap;
    let output = topic(bootstrap, "enriched");
    let dir = tempfile::tempdir().unwrap();
    let run = spawn(l, app, input, &output, "", dir.path(), None);
    let ad = admin(bootstrap);
    let out = || total_end_offset(&ad, &output, PARTITIONS);
    let deadline = Instant::now() + Duration::from_secs(60);
    while out() == 0 {
        assert!(Instant::now() < deadline, "{}: no output", app.label());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(env_or("WARM_SECS", 10)));
    let (o1, c1, t1) = (out(), cpu_seconds(run.pid), Instant::now());
    std::thread::sleep(Duration::from_secs(env_or("MEASURE_SECS", 20)));
    let (o2, c2, t2) = (out(), cpu_seconds(run.pid), Instant::now());
    let rss_mib = peak_rss_kib(run.pid) as f64 / 1024.0;
    run.stop();
    assert!(
        o2 > o1,
        "{}: no progress in the measured window",
        app.label()
    );
    assert_enriched(bootstrap, &output);
    drop_topics_of(&ad, &[&output]);
    let n = (o2 - o1) as f64;
    Sample {
        rate: n / (t2 - t1).as_secs_f64(),
        per_cpu: n / (c2 - c1).max(1e-9),
        rss_mib,
    }
}

/// The output holds the service's answers (a run that did not call it
/// cannot report a rate).
fn assert_enriched(bootstrap: &str, output: &str) {
    let mut c =
        rill_client::Consumer::new(&ClientConfig::new().set("bootstrap.servers", bootstrap))
            .unwrap();
    let tp = TopicPartition::new(output.to_string(), 0);
    c.assign(std::slice::from_ref(&tp)).unwrap();
    c.seek_to_beginning(std::slice::from_ref(&tp)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rs = c.poll(Duration::from_millis(200)).unwrap();
        if let Some(r) = rs.first() {
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            assert!(v.starts_with("enriched-"), "not enriched: {v:?}");
            return;
        }
        assert!(Instant::now() < deadline, "no output on partition 0");
    }
}

fn enrich(bin: &Path, bootstrap: &str, broker: &str, suffix: &str) {
    let delay = Duration::from_millis(env_or("SERVICE_MS", 5));
    let (url, served, _rt) = start_service(delay);
    let records: usize = env_or("RECORDS", 2_000_000);
    let input = topic(bootstrap, "lookups");
    let p = load_producer(bootstrap);
    let t0 = Instant::now();
    send_all(
        &p,
        (0..records).map(|i| {
            ProducerRecord::new(input.clone())
                .key(format!("k{}", i % 10_000))
                .value(format!("{i:0>32}"))
        }),
    );
    println!(
        "\n## enrich on {broker}: {records} records pre-loaded in {:.1} s; service {url} answers after {} ms",
        t0.elapsed().as_secs_f64(),
        delay.as_millis()
    );
    let apps = [App::RillAsync, App::RillSync, App::KafkaStreams];
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); apps.len()];
    let rounds: usize = env_or("ROUNDS", 5);
    for round in 0..rounds {
        for k in 0..apps.len() {
            let i = (k + round) % apps.len();
            let before = served.load(Ordering::Relaxed);
            let launch = Launch {
                bin,
                baseline: None,
                bootstrap,
                service: &url,
            };
            let s = enrich_run(&launch, apps[i], &input);
            println!(
                "round {round}: {:<14} {:>9.0} records/s, {:>8.0} per CPU-s, peak RSS {:.0} MiB ({} lookups served)",
                apps[i].label(),
                s.rate,
                s.per_cpu,
                s.rss_mib,
                served.load(Ordering::Relaxed) - before
            );
            samples[i].push(s);
        }
    }
    let rate = |i: usize| samples[i].iter().map(|s| s.rate).collect::<Vec<_>>();
    let ks = rate(2);
    println!("\n| app (2 stream threads, {}-ms lookups, {broker}) | records/s, median (min–max) | records per CPU-s | peak RSS MiB | × Kafka Streams, median (min–max) |", delay.as_millis());
    println!("|---|---|---|---|---|");
    for (i, app) in apps.iter().enumerate() {
        let r = rate(i);
        let (m, lo, hi) = ratio_stats(&r, &ks);
        let (med, min, max) = spread(&r);
        println!(
            "| {} | {:.0} ({:.0}–{:.0}) | {:.0} | {:.0} | {:.2} ({:.2}–{:.2}) |",
            app.label(),
            med,
            min,
            max,
            median(&samples[i].iter().map(|s| s.per_cpu).collect::<Vec<_>>()),
            median(&samples[i].iter().map(|s| s.rss_mib).collect::<Vec<_>>()),
            m,
            lo,
            hi
        );
    }
    bar_chart(
        &repo_root().join(format!("docs/img/async-enrich{suffix}.png")),
        &format!(
            "Enrichment with a {} ms lookup per record, records/s (median of {rounds}; {broker})",
            delay.as_millis()
        ),
        &["records/s"],
        &apps
            .iter()
            .enumerate()
            .map(|(i, a)| (a.label(), vec![median(&rate(i))]))
            .collect::<Vec<_>>(),
        true,
    );
}

/// Part 2: the cached word count with this build and `BASELINE_APP`.
fn wordcount(bin: &Path, bootstrap: &str, broker: &str) {
    let Some(baseline) = std::env::var_os("BASELINE_APP").map(PathBuf::from) else {
        println!("\n## wordcount: SKIPPED — set BASELINE_APP to a rill-streams-app built before async processing");
        return;
    };
    let lines: usize = env_or("WC_LINES", 4_500_000);
    let input = topic(bootstrap, "wc-lines");
    let p = load_producer(bootstrap);
    send_all(
        &p,
        (0..lines).map(|i| {
            let words: Vec<String> = (0..10)
                .map(|w| format!("w{}", (i * 7 + w * 13) % 10_000))
                .collect();
            ProducerRecord::new(input.clone())
                .key(format!("k{}", i % 1000))
                .value(words.join(" "))
        }),
    );
    println!(
        "\n## wordcount on {broker}: {lines} lines; this build vs {}",
        baseline.display()
    );
    let apps = [App::Rill, App::Baseline];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); 2];
    let mut per_cpu: Vec<Vec<f64>> = vec![Vec::new(); 2];
    let mut instr: Vec<Vec<f64>> = vec![Vec::new(); 2];
    let callgrind = Callgrind::requested();
    for round in 0..env_or("ROUNDS", 5usize) {
        for k in 0..2 {
            let i = (k + round) % 2;
            let output = topic(bootstrap, "wc-out");
            let dir = tempfile::tempdir().unwrap();
            let app_id_dir = dir.path().to_path_buf();
            let launch = Launch {
                bin,
                baseline: Some(&baseline),
                bootstrap,
                service: "-",
            };
            // RILL_BENCH_PERF=<dir>: a profile of each run (where the two builds
            // differ); RILL_BENCH_CALLGRIND=<dir>: its instructions, counted.
            let tag = wordcount_tag(apps[i] == App::Rill, round);
            let cg = callgrind.as_ref().map(|c| (c, tag.as_str()));
            let run = spawn(
                &launch,
                apps[i],
                &input,
                &output,
                "wordcount",
                &app_id_dir,
                cg,
            );
            // Committed input offsets over time: crossings of 20 % and 80 %.
            let ad = admin(bootstrap);
            let group = run.application_id.clone();
            let committed = || -> i64 {
                ad.list_consumer_group_offsets(&group)
                    .map(|m| {
                        m.iter()
                            .filter(|(tp, _)| tp.topic == input)
                            .map(|(_, o)| o.offset)
                            .sum()
                    })
                    .unwrap_or(0)
            };
            let perf = rill_benches::PerfRecord::start_if_requested(run.pid, &tag);
            // Under callgrind the whole run counts (see `Callgrind`): to the
            // last line.
            let (lo, hi) = match callgrind {
                Some(_) => (lines as i64 / 5, lines as i64),
                None => (lines as i64 / 5, lines as i64 * 4 / 5),
            };
            let deadline = Instant::now() + run.patience + Duration::from_secs(600);
            let mut at_lo = None;
            let at_hi = loop {
                let c = committed();
                let now = (Instant::now(), cpu_seconds(run.pid));
                if at_lo.is_none() && c >= lo {
                    at_lo = Some((now, c));
                }
                if c >= hi {
                    break (now, c);
                }
                assert!(
                    Instant::now() < deadline,
                    "{}: stuck at {c}",
                    apps[i].label()
                );
                std::thread::sleep(Duration::from_millis(100));
            };
            let application_id = run.application_id.clone();
            drop(perf);
            run.stop();
            // The run's topics go: the broker's log cleaner compacting
            // earlier runs' changelogs would otherwise load later rounds.
            drop_topics_of(&ad, &[&application_id, &output]);
            let ((t1, c1), o1) = at_lo.unwrap();
            let ((t2, c2), o2) = at_hi;
            let n = (o2 - o1) as f64;
            rates[i].push(n / (t2 - t1).as_secs_f64());
            per_cpu[i].push(n / (c2 - c1).max(1e-9));
            if let Some(cg) = &callgrind {
                // The file is complete once the process has exited (`stop`).
                instr[i].push(cg.instructions(&tag) as f64 / lines as f64);
            }
            println!(
                "round {round}: {:<18} {:>9.0} lines/s, {:>8.0} lines per CPU-s{}",
                apps[i].label(),
                rates[i].last().unwrap(),
                per_cpu[i].last().unwrap(),
                instr[i]
                    .last()
                    .map(|v| format!(", {v:.0} instructions per line"))
                    .unwrap_or_default()
            );
        }
    }
    let (m, lo, hi) = ratio_stats(&rates[0], &rates[1]);
    let (cm, clo, chi) = ratio_stats(&per_cpu[0], &per_cpu[1]);
    println!("\n| cached word count, {broker} | lines/s (median) | lines per CPU-s (median) |");
    println!("|---|---|---|");
    for i in 0..2 {
        println!(
            "| {} | {:.0} | {:.0} |",
            apps[i].label(),
            median(&rates[i]),
            median(&per_cpu[i])
        );
    }
    println!("| with / before | {m:.3} ({lo:.3}–{hi:.3}) | {cm:.3} ({clo:.3}–{chi:.3}) |");
    if let Some(cg) = &callgrind {
        let rounds = instr[0].len();
        // The same work weighed with each build's cost per call (see
        // benches/python/callgrind_compare.py): every pair of a run before
        // and a run with, and as the control, pairs of runs before.
        let mut with = Vec::new();
        let mut control = Vec::new();
        for a in 0..rounds {
            for b in 0..rounds {
                with.push(cg.compare(&wordcount_tag(false, a), &wordcount_tag(true, b)));
                if a != b {
                    control.push(cg.compare(&wordcount_tag(false, a), &wordcount_tag(false, b)));
                }
            }
        }
        let range = |v: &[f64]| {
            let (m, lo, hi) = spread(v);
            format!("{m:.4} ({lo:.4}–{hi:.4})")
        };
        println!(
            "instructions for the same work (callgrind, cost per call weighed by calls): with / before {}; before / before (control) {}",
            range(&with),
            range(&control)
        );
        let (im, ilo, ihi) = ratio_stats(&instr[0], &instr[1]);
        println!(
            "instructions per line (callgrind, whole runs): with {:.0}, before {:.0}; with / before {im:.4} ({ilo:.4}–{ihi:.4})",
            median(&instr[0]),
            median(&instr[1])
        );
    }
}

/// The profile name of a word-count run: this build (`with`) or the
/// baseline, and its round.
fn wordcount_tag(with: bool, round: usize) -> String {
    format!("wordcount-{}-{round}", if with { "with" } else { "before" })
}

/// Deletes every topic named in `names` or starting with one of them and
/// a dash (an application's repartition and changelog topics).
fn drop_topics_of(ad: &Admin, names: &[&str]) {
    let topics: Vec<String> = ad
        .list_topics()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| {
            names
                .iter()
                .any(|n| t == n || t.starts_with(&format!("{n}-")))
        })
        .collect();
    let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    if let Err(e) = ad.delete_topics(&refs) {
        println!("(could not delete {refs:?}: {e})");
    }
}

fn main() {
    rill_benches::serve_broker_if_requested();
    let parts = std::env::var("PARTS").unwrap_or_else(|_| "enrich,wordcount".into());
    let bin = rill_benches::streams_app_binary();
    println!("{}", machine_summary());
    let brokers = std::env::var("BROKERS").unwrap_or_else(|_| "kafka".into());
    let run = |bootstrap: &str, broker: &str, suffix: &str| {
        if parts.contains("enrich") {
            enrich(&bin, bootstrap, broker, suffix);
        }
        if parts.contains("wordcount") {
            wordcount(&bin, bootstrap, broker);
        }
    };
    if brokers.contains("kafka") {
        let kafka = ApacheKafka::start().expect("Apache Kafka starts");
        run(
            &kafka.bootstrap,
            &format!("Apache Kafka {KAFKA_VERSION}"),
            "",
        );
    }
    if brokers.contains("embedded") {
        let broker = spawn_broker_process();
        run(&broker.bootstrap, "the embedded broker", "-embedded");
    }
}
