//! Turning Slurm's answers into the facts policies decide on.

use crate::policy::pool::AllocationFacts;
use crate::slurm::JobDetails;

use super::context::local_to_micros;

/// The facts about one allocation, from `scontrol show job`.
pub fn allocation_facts(d: &JobDetails) -> AllocationFacts {
    let node_count = d
        .num_nodes
        .as_deref()
        .and_then(|n| n.split('-').next())
        .and_then(|n| n.parse::<usize>().ok());
    let nodes = match (d.node_list.as_deref(), node_count) {
        (Some(list), Some(1)) if !list.is_empty() && list != "(null)" => vec![list.to_owned()],
        // Several nodes: the exact names do not matter, only that there is more than one.
        (Some(list), Some(n)) if n > 1 => (0..n).map(|i| format!("{list}#{i}")).collect(),
        (Some(list), None)
            if !list.is_empty() && list != "(null)" && !list.contains(['[', ',']) =>
        {
            vec![list.to_owned()]
        }
        (Some(list), None) if list.contains(['[', ',']) => vec![list.to_owned(), list.to_owned()],
        _ => Vec::new(),
    };
    AllocationFacts {
        job_id: u64::from(d.job_id.get()),
        state: d.state.to_string(),
        user: d.user.clone().unwrap_or_default(),
        nodes,
        start_time: d.start_time.and_then(|t| t.at()).and_then(local_to_micros),
        end_time: d.end_time.and_then(|t| t.at()).and_then(local_to_micros),
        cpus: d.num_cpus.unwrap_or(0),
        mem_mb: d.tres_mem.map_or(0, |m| m.get()),
        partition: d.partition.clone().unwrap_or_default(),
        account: d.account.clone().unwrap_or_default(),
        qos: d.qos.clone().unwrap_or_default(),
    }
}
