//! Turning Slurm's answers into the facts policies decide on.

use crate::policy::pool::{AllocationFacts, Nodes};
use crate::slurm::JobDetails;

use super::context::local_to_micros;

/// The facts about one allocation, from `scontrol show job`.
pub fn allocation_facts(d: &JobDetails) -> AllocationFacts {
    let node_count = d
        .num_nodes
        .as_deref()
        .and_then(|n| n.split('-').next())
        .and_then(|n| n.parse::<usize>().ok());
    let named = d
        .node_list
        .as_deref()
        .filter(|l| !l.is_empty() && *l != "(null)");
    let nodes = match (named, node_count) {
        (Some(list), Some(1)) => Nodes::One(list.to_owned()),
        (Some(list), Some(n)) if n > 1 => Nodes::Several(list.to_owned()),
        // No node count: a list of names (`n[1-2]`, `a,b`) is several, a bare name one.
        (Some(list), None) if list.contains(['[', ',']) => Nodes::Several(list.to_owned()),
        (Some(list), None) => Nodes::One(list.to_owned()),
        _ => Nodes::Unplaced,
    };
    AllocationFacts {
        job_id: d.job_id,
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
        comment: d
            .get("Comment")
            .filter(|c| *c != "(null)")
            .unwrap_or_default()
            .to_owned(),
        shares: d.node_shares.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::scontrol::parse_show_job;

    fn nodes_of(fields: &str) -> Nodes {
        let text = format!("JobId=7 UserId=root(0) JobState=RUNNING {fields}\n");
        let d = parse_show_job(&text).unwrap();
        allocation_facts(&d[0]).nodes
    }

    #[test]
    fn one_node_several_or_none_as_slurm_says() {
        assert_eq!(nodes_of("NumNodes=1 NodeList=vm"), Nodes::One("vm".into()));
        assert_eq!(
            nodes_of("NumNodes=2 NodeList=n[1-2]"),
            Nodes::Several("n[1-2]".into())
        );
        assert_eq!(
            nodes_of("NumNodes=2-4 NodeList=n[1-2]"),
            Nodes::Several("n[1-2]".into())
        );
        // Without a count the list's shape tells.
        assert_eq!(nodes_of("NodeList=vm"), Nodes::One("vm".into()));
        assert_eq!(nodes_of("NodeList=a,b"), Nodes::Several("a,b".into()));
        assert_eq!(nodes_of("NumNodes=1 NodeList=(null)"), Nodes::Unplaced);
        assert_eq!(nodes_of("NumNodes=1"), Nodes::Unplaced);
    }
}
