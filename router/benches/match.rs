//! `TriggerIndex::choose` with 10, 1,000 and 100,000 live workflows spread over tenants and
//! event types: matching should cost the same at every size, well under a microsecond.
//!
//! Run with `cargo bench -p switchyard-router --bench match`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use switchyard_core::{Channel, Trigger, Workflow, WorkflowStatus};
use switchyard_router::TriggerIndex;

const EVENT_TYPES: [&str; 10] = [
    "ticket.created",
    "ticket.updated",
    "ticket.solved",
    "ticket.comment_added",
    "ticket.status_changed",
    "ticket.priority_changed",
    "urgent_message",
    "message",
    "email.received",
    "form.submitted",
];
const CHANNELS: [Channel; 5] = [
    Channel::Webhook,
    Channel::Slack,
    Channel::Email,
    Channel::WebForm,
    Channel::Chat,
];

/// `count` live workflows: ten per tenant, two triggers each over the channels and event
/// types, so each trigger key has a few competing candidates.
fn workflows(count: usize) -> Vec<Workflow> {
    (0..count)
        .map(|i| Workflow {
            id: format!("wf-{i:06}"),
            tenant_id: format!("tenant-{:05}", i / 10),
            status: WorkflowStatus::Live,
            lock_ttl: Workflow::DEFAULT_LOCK_TTL,
            triggers: vec![
                Trigger {
                    channel: CHANNELS[i % CHANNELS.len()],
                    event_type: EVENT_TYPES[i % 3].into(),
                    priority: (i % 7) as i32,
                    when: None,
                },
                Trigger {
                    channel: CHANNELS[(i / 2) % CHANNELS.len()],
                    event_type: EVENT_TYPES[3 + i % 7].into(),
                    priority: (i % 11) as i32,
                    when: None,
                },
            ],
        })
        .collect()
}

/// 1,024 lookups spread over the index: the first trigger of workflows across the whole range
/// (hits), or a tenant that exists with an event type no workflow uses (misses).
fn queries(workflows: &[Workflow], hit: bool) -> Vec<(String, Channel, String)> {
    (0..1024)
        .map(|k| {
            let workflow = &workflows[(k * 7919) % workflows.len()];
            let trigger = &workflow.triggers[0];
            let event_type = if hit {
                trigger.event_type.clone()
            } else {
                "ticket.unknown".to_owned()
            };
            (workflow.tenant_id.clone(), trigger.channel, event_type)
        })
        .collect()
}

fn choose(c: &mut Criterion) {
    let mut group = c.benchmark_group("choose");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    for count in [10, 1_000, 100_000] {
        let workflows = workflows(count);
        let index = TriggerIndex::build("bench", &workflows);
        for (name, hit) in [("hit", true), ("miss", false)] {
            let queries = queries(&workflows, hit);
            assert_eq!(
                index
                    .choose(&queries[0].0, queries[0].1, &queries[0].2)
                    .is_some(),
                hit
            );
            let mut next = 0;
            group.bench_with_input(BenchmarkId::new(name, count), &index, |b, index| {
                b.iter(|| {
                    let (tenant, channel, event_type) = &queries[next % queries.len()];
                    next += 1;
                    black_box(index.choose(
                        black_box(tenant),
                        black_box(*channel),
                        black_box(event_type),
                    ))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, choose);
criterion_main!(benches);
