//! Song charts by genre, queried over REST: Confluent's `KafkaMusicExample`
//! (kafka-streams-examples), written for Rill from its description.
//!
//! `cargo run --release --example music` starts an embedded broker (or uses
//! `--bootstrap-server` / `--config FILE`), writes a catalogue of songs to
//! `song-feed` and plays to `play-events` (JSON values), and runs:
//!
//! play-events ─filter(played ≥ 30 s)→ re-key by song id → join(song-feed
//! table) → group by song → count (`song-play-count`) → group by genre →
//! aggregate(adder, subtractor) → `top-five-songs-by-genre`, and the same
//! over all genres → `top-five-songs`
//!
//! Every serde comes from the types (`Json<Song>` keys and values included).
//! The example then asks the REST server for each genre's chart
//! (`GET /v1/stores/top-five-songs-by-genre/keys/<genre>`) and the overall
//! one, and checks them against the plays it wrote.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Parser;
use rill_client::ProducerRecord;
use rill_examples::Connection;
use rill_streams::{Json, KafkaSerde, KafkaStreams, State, StreamsBuilder, Topology};
use serde::{Deserialize, Serialize};

const SONGS: &str = "song-feed";
const PLAYS: &str = "play-events";
const BY_GENRE: &str = "top-five-songs-by-genre";
const OVERALL: &str = "top-five-songs";
const MIN_PLAY_MS: i64 = 30_000;
const GENRES: [&str; 4] = ["punk", "hip hop", "jazz", "folk"];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Song {
    id: i64,
    name: String,
    artist: String,
    genre: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct PlayEvent {
    song_id: i64,
    duration_ms: i64,
}

/// A song's play count (Confluent's `SongPlayCount`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct SongPlayCount {
    song_id: i64,
    name: String,
    plays: i64,
}

/// Every song's play count in a chart; the top five are read from it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Chart {
    /// song id → (name, plays)
    songs: BTreeMap<i64, (String, i64)>,
}

impl Chart {
    fn top_five(&self) -> Vec<(String, i64)> {
        let mut v: Vec<(i64, &String, i64)> =
            self.songs.iter().map(|(id, (n, p))| (*id, n, *p)).collect();
        v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        v.into_iter()
            .take(5)
            .map(|(_, n, p)| (n.clone(), p))
            .collect()
    }
}

#[derive(Parser, Debug)]
#[command(about = "Song charts by genre over interactive queries: embedded broker by default")]
struct Args {
    #[command(flatten)]
    connection: Connection,
}

fn topology() -> rill_streams::Result<Topology> {
    let b = StreamsBuilder::new();
    let songs = b.table::<i64, Json<Song>>(SONGS);
    let play_counts = b
        .stream::<String, Json<PlayEvent>>(PLAYS)
        .filter(|_, play| play.duration_ms >= MIN_PLAY_MS)
        .map(|_, play| (play.song_id, play.clone()))
        .join(&songs, |_play, song| song.clone())
        .group_by(|_, song| song.clone())
        .count("song-play-count");
    let count = |song: &Json<Song>, plays: &i64| {
        Json(SongPlayCount {
            song_id: song.id,
            name: song.name.clone(),
            plays: *plays,
        })
    };
    // A song's new count arrives as its old count's removal and the new one's addition.
    let add = |_: &String, c: &Json<SongPlayCount>, chart: &Json<Chart>| {
        let mut chart = chart.clone();
        chart.songs.insert(c.song_id, (c.name.clone(), c.plays));
        chart
    };
    let remove = |_: &String, c: &Json<SongPlayCount>, chart: &Json<Chart>| {
        let mut chart = chart.clone();
        chart.songs.remove(&c.song_id);
        chart
    };
    play_counts
        .group_by(move |song, plays| (song.genre.clone(), count(song, plays)))
        .aggregate(Json::<Chart>::default, add, remove, BY_GENRE);
    play_counts
        .group_by(move |song, plays| ("all".to_string(), count(song, plays)))
        .aggregate(Json::<Chart>::default, add, remove, OVERALL);
    b.build()
}

fn catalogue() -> Vec<Song> {
    (0..12)
        .map(|i| Song {
            id: 100 + i,
            name: format!("song-{i}"),
            artist: format!("artist-{}", i % 5),
            genre: GENRES[i as usize % GENRES.len()].to_string(),
        })
        .collect()
}

fn plays() -> Vec<PlayEvent> {
    (0..600i64)
        .map(|i| PlayEvent {
            song_id: 100 + (i * 7 + i / 5 + i * i % 11) % 12,
            duration_ms: 10_000 + (i * 13 % 50) * 1_000,
        })
        .collect()
}

fn main() -> std::process::ExitCode {
    rill_examples::run_app("music", run)
}

fn run() -> Result<(), rill_examples::Error> {
    let args = Args::parse();
    let ex = args.connection.example(
        "music",
        &[
            ("application.server", "127.0.0.1:0".to_string()),
            ("commit.interval.ms", "100".to_string()),
        ],
        &[(SONGS, 2), (PLAYS, 2)],
    )?;
    let (cfg, producer) = (ex.config.clone(), &ex.producer);
    let (id_serde, song_serde) = (i64::serde(), Json::<Song>::serde());
    let mut sent = Vec::new();
    // A stream-table join reads the table as of each play's timestamp
    // (Kafka's semantics): the catalogue is dated a second before the
    // plays, so every play finds its song whichever task starts first.
    let catalogued_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64
        - 1_000;
    for song in catalogue() {
        let key = id_serde.serialize(SONGS, &song.id)?.ok_or("null id")?;
        let value = song_serde
            .serialize(SONGS, &Json(song))?
            .ok_or("null song")?;
        sent.push(
            producer.send(
                ProducerRecord::new(SONGS)
                    .key(key)
                    .value(value)
                    .timestamp(catalogued_at),
            )?,
        );
    }
    let play_serde = Json::<PlayEvent>::serde();
    for (i, play) in plays().into_iter().enumerate() {
        let value = play_serde
            .serialize(PLAYS, &Json(play))?
            .ok_or("null play")?;
        let location = format!("store-{}", i % 3);
        sent.push(producer.send(ProducerRecord::new(PLAYS).key(location).value(value))?);
    }
    for delivery in sent {
        delivery.wait()?;
    }

    // The charts the plays make.
    let songs: BTreeMap<i64, Song> = catalogue().into_iter().map(|s| (s.id, s)).collect();
    let mut expected: BTreeMap<String, Chart> = BTreeMap::new();
    for play in plays().iter().filter(|p| p.duration_ms >= MIN_PLAY_MS) {
        let song = &songs[&play.song_id];
        for key in [song.genre.clone(), "all".to_string()] {
            let e = expected.entry(key).or_default();
            e.songs.entry(song.id).or_insert((song.name.clone(), 0)).1 += 1;
        }
    }
    println!(
        "wrote {} songs and {} plays ({} of them ≥ 30 s)",
        songs.len(),
        plays().len(),
        plays()
            .iter()
            .filter(|p| p.duration_ms >= MIN_PLAY_MS)
            .count()
    );

    let streams = KafkaStreams::new(topology()?, cfg)?;
    for store in [BY_GENRE, OVERALL] {
        streams.expose_store(store, Json::<Chart>::serde(), |c| {
            serde_json::json!(c.top_five())
        });
    }
    streams.start()?;
    let rest = streams.rest_address().ok_or("no REST server")?;
    let http = reqwest::blocking::Client::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if streams.state() == State::Error {
            return Err(format!("the app failed: {:?}", streams.thread_errors()).into());
        }
        let mut wrong = Vec::new();
        let mut charts = Vec::new();
        for (key, chart) in &expected {
            let store = if key == "all" { OVERALL } else { BY_GENRE };
            let url = format!("http://{rest}/v1/stores/{store}/keys/{key}");
            let body: serde_json::Value = match http.get(&url).send() {
                Ok(r) if r.status().is_success() => serde_json::from_str(&r.text()?)?,
                _ => serde_json::Value::Null,
            };
            let want = serde_json::json!(chart.top_five());
            if body["value"] != want {
                wrong.push(format!("{key}: {} want {want}", body["value"]));
            }
            charts.push(format!("{key:>8}: {}", want));
        }
        if wrong.is_empty() {
            for c in charts {
                println!("{c}");
            }
            println!(
                "all {} charts correct over REST (the top five of each genre and overall)",
                expected.len()
            );
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("charts still wrong after 120 s: {wrong:?}").into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    streams.close();
    Ok(())
}
