//! A diagnostic replay of a mixed day reproduces every outcome and writes nothing live; a
//! candidate with a higher-priority workflow moves exactly the deliveries it should.

use super::*;

/// The candidate: the same, plus a workflow that outranks `triage` on new tickets.
const VIP: &str = r#"
[[workflow]]
id = "vip-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 200 } ]
"#;

#[tokio::test]
async fn a_mixed_day_replays_exactly_writes_nothing_live_and_a_candidate_moves_what_it_should() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let (worker_url, received) = worker().await;
        let text = config(&db, &setup(&worker_url));
        let daemon = Daemon::start(&db, &text, &ENV).await;

        // The day: routed, its duplicate, entity_locked, routed again once the run finished,
        // invalid, ineligible, no_trigger_match, and another routed ticket.
        let first = send_zendesk(&daemon, zendesk(TICKET_CREATED, "evt-1", "5158")).await;
        assert_eq!(first["outcome"], "routed", "{backend:?}: {first}");
        let again = send_zendesk(&daemon, zendesk(TICKET_CREATED, "evt-1", "5158")).await;
        assert_eq!(again["outcome"], "duplicate", "{backend:?}: {again}");
        let locked = send_zendesk(&daemon, zendesk(COMMENT_ADDED, "evt-2", "5158")).await;
        assert_eq!(locked["outcome"], "entity_locked", "{backend:?}: {locked}");
        until("the first run's dispatch", || async {
            received.load(Ordering::SeqCst) >= 1
        })
        .await;
        let (status, finished) = daemon.finish(&run_id(&first), "completed").await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{backend:?}: {finished}\n{}",
            daemon.logs()
        );
        let after = send_zendesk(&daemon, zendesk(COMMENT_ADDED, "evt-3", "5158")).await;
        assert_eq!(after["outcome"], "routed", "{backend:?}: {after}");
        let invalid = send_zendesk(&daemon, b"{not json".to_vec()).await;
        assert_eq!(
            invalid["outcome"], "invalid_event",
            "{backend:?}: {invalid}"
        );
        let mut bot: Value = serde_json::from_str(BOT_MESSAGE).expect("fixture");
        bot["event_id"] = json!(unique("Ev"));
        let ineligible = send_slack(&daemon, serde_json::to_vec(&bot).expect("json")).await;
        assert_eq!(
            ineligible["outcome"], "ineligible",
            "{backend:?}: {ineligible}"
        );
        let (_, unmatched) = daemon
            .post_event(
                &unique("k"),
                &event("chat", "nobody.listens", "acme", "c-1"),
            )
            .await;
        assert_eq!(unmatched["outcome"], "no_trigger_match", "{unmatched}");
        let other = send_zendesk(&daemon, zendesk(TICKET_CREATED, "evt-4", "6001")).await;
        assert_eq!(other["outcome"], "routed", "{backend:?}: {other}");
        until("every dispatch recorded", || async {
            let runs = daemon.runs("limit=100").await;
            runs.len() == 3 && runs.iter().all(|r| r["status"] != "queued")
        })
        .await;
        assert_eq!(received.load(Ordering::SeqCst), 3, "{backend:?}");

        let store = Database::connect(&db.url).await.expect("connect");
        let before = live_rows(&store).await;
        let ledger = daemon.intake("limit=100").await;
        assert_eq!(
            ledger.len(),
            7,
            "{backend:?}: the duplicate has no row of its own: {:?}",
            ledger
                .iter()
                .map(|r| (r["source"].clone(), r["outcome"].clone()))
                .collect::<Vec<_>>()
        );

        // Under the original revision: every outcome exactly as it was.
        let original = replay(&daemon, &json!({})).await;
        assert_eq!(original["status"], "completed", "{backend:?}: {original}");
        assert_eq!(original["progress"]["total"], 7, "{original}");
        assert_eq!(original["progress"]["done"], 7, "{original}");
        assert_eq!(original["progress"]["differ"], 0, "{backend:?}: {original}");
        assert_eq!(original["mode"], "diagnostic");
        assert_eq!(original["actor"], "token:api_token");
        let replayed = outcomes(&original);
        assert_eq!(replayed.len(), 7);
        for row in &ledger {
            let id = row["id"].as_str().expect("id");
            let found = replayed
                .iter()
                .find(|(intake, ..)| intake == id)
                .unwrap_or_else(|| panic!("{backend:?}: {id} not replayed: {original}"));
            assert_eq!(found.1, found.2, "{backend:?}: {found:?}");
            assert!(!found.3, "{found:?}");
        }
        let mut words: Vec<&str> = ledger
            .iter()
            .map(|r| r["outcome"].as_str().unwrap_or(""))
            .collect();
        words.sort_unstable();
        assert_eq!(
            words,
            [
                "entity_locked",
                "ineligible",
                "invalid_event",
                "no_trigger_match",
                "routed",
                "routed",
                "routed"
            ],
            "{backend:?}"
        );

        // Under a candidate that adds a higher-priority workflow: the two new tickets move.
        let candidate_text = format!("{text}{VIP}");
        let moved = replay(
            &daemon,
            &json!({"revision": "candidate", "candidate": candidate_text}),
        )
        .await;
        assert_eq!(moved["status"], "completed", "{moved}");
        assert_eq!(moved["progress"]["differ"], 2, "{backend:?}: {moved}");
        let changed: Vec<(String, String, String, bool)> =
            outcomes(&moved).into_iter().filter(|r| r.3).collect();
        let mut expected = [first["intake_id"].clone(), other["intake_id"].clone()];
        expected.sort_by_key(|v| v.as_str().unwrap_or("").to_owned());
        assert_eq!(
            changed
                .iter()
                .map(|r| (r.0.as_str(), r.1.as_str(), r.2.as_str()))
                .collect::<Vec<_>>(),
            expected
                .iter()
                .map(|id| (
                    id.as_str().unwrap_or(""),
                    "routed:triage",
                    "routed:vip-triage"
                ))
                .collect::<Vec<_>>(),
            "{backend:?}: {moved}"
        );
        let table = moved["report"]["text"].as_str().expect("report text");
        assert!(
            table.contains(
                "ticket.created: triage 2 -> 0, vip-triage 0 -> 2\n  triage -> vip-triage: 2, e.g."
            ),
            "{backend:?}: {table}"
        );
        assert!(
            table.contains(
                "ticket.comment_added: comment-reply 1 -> 1, entity_locked (comment-reply) 1 -> 1\n"
            ),
            "{backend:?}: {table}"
        );

        // The console lists both replays and shows the candidate's report.
        let console =
            super::super::console::Console::login(&daemon, super::super::harness::TOKEN).await;
        let list = console.page("/ui/replays").await;
        let moved_id = moved["id"].as_str().expect("id");
        assert!(list.contains(&format!("/ui/replays/{moved_id}")), "{list}");
        assert!(
            list.contains(original["id"].as_str().expect("id")),
            "{list}"
        );
        let page = console.page(&format!("/ui/replays/{moved_id}")).await;
        assert!(page.contains("candidate "), "{page}");
        assert!(
            page.contains(
                "<span class=\"mono\">triage</span> → <span class=\"mono\">vip-triage</span>: 2"
            ),
            "{page}"
        );
        assert!(
            page.contains(&format!(
                "/ui/deliveries/{}",
                first["intake_id"].as_str().unwrap_or("")
            )),
            "{page}"
        );

        // Nothing live was written, and the worker received nothing more.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(live_rows(&store).await, before, "{backend:?}");
        assert_eq!(received.load(Ordering::SeqCst), 3, "{backend:?}");

        // The CLI: the same report, and `check --against-ledger` prints the same table.
        let candidate_path = db.dir.path().join(format!("{}.toml", unique("candidate")));
        std::fs::write(&candidate_path, &candidate_text).expect("write candidate");
        let out = Command::new(binary())
            .args(["replay", "--config"])
            .arg(&daemon.config_path)
            .arg("--candidate")
            .arg(&candidate_path)
            .output()
            .expect("run replay");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{backend:?}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("completed: 7 replayed, 2 differ"),
            "{stdout}"
        );
        assert!(
            stdout.contains("ticket.created: triage 2 -> 0, vip-triage 0 -> 2"),
            "{stdout}"
        );
        let listed = daemon.get("/v1/replays").await;
        assert_eq!(
            listed["replays"].as_array().map(Vec::len),
            Some(3),
            "{listed}"
        );
        assert!(
            listed["replays"][0]["actor"]
                .as_str()
                .unwrap_or("")
                .starts_with("cli:")
        );

        let check = |extra: &[&str], candidate: &std::path::Path| {
            Command::new(binary())
                .args(["check", "--config"])
                .arg(&daemon.config_path)
                .arg("--candidate")
                .arg(candidate)
                .args(["--against-ledger", "1d"])
                .args(extra)
                .envs(ENV)
                .env("SWITCHYARD_API_TOKEN", TOKEN)
                .output()
                .expect("run check")
        };
        let out = check(&[], &candidate_path);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("7 deliveries, 2 would come out differently"),
            "{stdout}"
        );
        let table = format!(
            "(no event): invalid_event 1 -> 1\n\
             message: ineligible 1 -> 1\n\
             nobody.listens: no_trigger_match 1 -> 1\n\
             ticket.comment_added: comment-reply 1 -> 1, entity_locked (comment-reply) 1 -> 1\n\
             ticket.created: triage 2 -> 0, vip-triage 0 -> 2\n  \
             triage -> vip-triage: 2, e.g. {} (delivery evt-1), {} (delivery evt-4)\n",
            first["intake_id"].as_str().unwrap_or(""),
            other["intake_id"].as_str().unwrap_or("")
        );
        assert!(
            stdout.ends_with(&table),
            "{backend:?}: expected\n{table}\ngot\n{stdout}"
        );
        let out = check(&["--fail-on-change"], &candidate_path);
        assert!(
            !out.status.success(),
            "--fail-on-change with changes must fail"
        );
        let out = check(&["--fail-on-change"], &daemon.config_path);
        assert!(
            out.status.success(),
            "no change: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            live_rows(&store).await,
            before,
            "{backend:?}: the CLI wrote nothing live"
        );

        // Filters take only what they name; bad requests are refused, naming the field.
        let only_locked = replay(&daemon, &json!({"outcome": "entity_locked"})).await;
        assert_eq!(only_locked["progress"]["total"], 1, "{only_locked}");
        let (status, refused) = daemon
            .post("/v1/replays", &json!({"outcome": "nope"}))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert!(
            refused["detail"]
                .as_str()
                .unwrap_or("")
                .contains("`outcome`"),
            "{refused}"
        );
        let (status, refused) = daemon
            .post(
                "/v1/replays",
                &json!({"revision": "candidate", "candidate": "[[workflow]]\nid = 1"}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert!(
            refused["detail"]
                .as_str()
                .unwrap_or("")
                .contains("candidate"),
            "{refused}"
        );
        let (status, refused) = daemon
            .post(
                "/v1/replays",
                &json!({"mode": "live", "revision": "original"}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");

        daemon.stop();
        db.drop_database().await;
    }
}
