//! Why a pod of an McpUpstream does not run, from its status as the kubelet and the scheduler
//! write it: an image that cannot be pulled, a container in a crash loop, or no node to run on.
//!
//! Not responsible for: turning it into a condition ([`crate::status::conditions`]); the stdio
//! child that the proxy restarts inside a running container (the proxy's `/upstream`, BR-34).

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::bound::truncate;

/// `waiting.reason` values the kubelet sets when it cannot get a container's image.
const IMAGE_PULL_REASONS: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// What keeps one pod from running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// A container's image cannot be pulled (`waiting.reason` is one of `ErrImagePull`,
    /// `ImagePullBackOff`, `InvalidImageName`, `ErrImageNeverPull`).
    ImagePull {
        /// The container's name.
        container: String,
        /// The image reference the pod asks for.
        image: String,
        /// The kubelet's `waiting.reason`.
        reason: String,
        /// The kubelet's `waiting.message` (cut), possibly empty.
        message: String,
    },
    /// A container keeps exiting (`waiting.reason` is `CrashLoopBackOff`).
    CrashLoop {
        /// The container's name.
        container: String,
        /// Exit code of its last run, when the kubelet recorded one.
        exit_code: Option<i32>,
        /// Its `restartCount`.
        restarts: i32,
    },
    /// The scheduler found no node (`PodScheduled=False`, reason `Unschedulable`).
    Unschedulable {
        /// The scheduler's message (cut), e.g. `0/3 nodes are available: ...`.
        message: String,
    },
}

impl Blocked {
    /// What keeps `pod` from running, as a sentence for a condition message.
    pub fn describe(&self, pod: &str) -> String {
        match self {
            Self::ImagePull {
                container,
                image,
                reason,
                message,
            } => {
                let detail = if message.is_empty() {
                    String::new()
                } else {
                    format!(": {message}")
                };
                format!(
                    "container {container} of pod {pod} cannot pull image {image} ({reason}){detail}"
                )
            }
            Self::CrashLoop {
                container,
                exit_code,
                restarts,
            } => {
                let code = exit_code.map_or_else(|| "unknown".to_owned(), |c| c.to_string());
                format!(
                    "container {container} of pod {pod} keeps exiting (exit code {code}, \
                     {restarts} restarts)"
                )
            }
            Self::Unschedulable { message } => {
                format!("pod {pod} cannot be scheduled: {message}")
            }
        }
    }
}

/// What keeps `pod` from running, if its status says: an image pull failure first, then a
/// crash loop (init containers, the native sidecar among them, before the others), then the
/// scheduler's verdict.
pub fn of_pod(pod: &Pod) -> Option<Blocked> {
    let status = pod.status.as_ref()?;
    let containers: Vec<&ContainerStatus> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .collect();
    let waiting = |c: &&ContainerStatus| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        Some((waiting.reason.clone()?, waiting.message.clone()))
    };
    let pull = containers.iter().find_map(|c| {
        let (reason, message) = waiting(c)?;
        IMAGE_PULL_REASONS
            .contains(&reason.as_str())
            .then(|| Blocked::ImagePull {
                container: truncate(&c.name),
                image: truncate(&c.image),
                reason: truncate(&reason),
                message: truncate(message.as_deref().unwrap_or_default()),
            })
    });
    let crash = || {
        containers.iter().find_map(|c| {
            let (reason, _) = waiting(c)?;
            (reason == "CrashLoopBackOff").then(|| Blocked::CrashLoop {
                container: truncate(&c.name),
                exit_code: c
                    .last_state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .map(|t| t.exit_code),
                restarts: c.restart_count,
            })
        })
    };
    let unschedulable = || {
        let scheduled = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled")?;
        (scheduled.status == "False" && scheduled.reason.as_deref() == Some("Unschedulable")).then(
            || Blocked::Unschedulable {
                message: truncate(scheduled.message.as_deref().unwrap_or_default()),
            },
        )
    };
    pull.or_else(crash).or_else(unschedulable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: &str) -> Pod {
        serde_yaml::from_str(&format!("metadata: {{name: p}}\nstatus: {status}\n"))
            .expect("pod fixture parses")
    }

    #[test]
    fn of_pod_image_pull_back_off_names_container_and_image() {
        let blocked = of_pod(&pod(
            "{initContainerStatuses: [{name: upstream, image: 'r.example/s@sha256:aa', imageID: '', ready: false, restartCount: 0, state: {waiting: {reason: ImagePullBackOff, message: 'Back-off pulling image'}}}]}",
        ));
        assert_eq!(
            blocked.map(|b| b.describe("p")).as_deref(),
            Some(
                "container upstream of pod p cannot pull image r.example/s@sha256:aa \
                 (ImagePullBackOff): Back-off pulling image"
            )
        );
    }

    #[test]
    fn of_pod_crash_loop_names_container_and_exit_code() {
        let blocked = of_pod(&pod(
            "{containerStatuses: [{name: proxy, image: x, imageID: '', ready: false, restartCount: 5, state: {waiting: {reason: CrashLoopBackOff}}, lastState: {terminated: {exitCode: 3}}}]}",
        ));
        assert_eq!(
            blocked.map(|b| b.describe("p")).as_deref(),
            Some("container proxy of pod p keeps exiting (exit code 3, 5 restarts)")
        );
    }

    #[test]
    fn of_pod_unschedulable_carries_the_scheduler_message() {
        let blocked = of_pod(&pod(
            "{conditions: [{type: PodScheduled, status: 'False', reason: Unschedulable, message: '0/3 nodes are available'}]}",
        ));
        assert_eq!(
            blocked,
            Some(Blocked::Unschedulable {
                message: "0/3 nodes are available".to_owned()
            })
        );
    }

    #[test]
    fn of_pod_running_or_creating_is_not_blocked() {
        assert_eq!(
            of_pod(&pod(
                "{containerStatuses: [{name: proxy, image: x, imageID: '', ready: false, restartCount: 0, state: {waiting: {reason: ContainerCreating}}}]}"
            )),
            None
        );
        assert_eq!(of_pod(&pod("{phase: Running}")), None);
    }
}
