"""Kubernetes Pod Security Standards, "restricted" profile (which includes "baseline"), as an offline check of a
pod spec: what the PodSecurity admission controller would refuse in a namespace labelled
pod-security.kubernetes.io/enforce=restricted. Written from the published standard (policy version v1.30):
https://kubernetes.io/docs/concepts/security/pod-security-standards/ . Returns the violations, one line each.
"""

from __future__ import annotations

# baseline
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# restricted
VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                "secret"}
SECCOMP_OK = {"RuntimeDefault", "Localhost"}


def violations(pod_spec: dict) -> list[str]:
    found: list[str] = []
    pod_security = pod_spec.get("securityContext") or {}
    containers = [*pod_spec.get("initContainers", []), *pod_spec.get("containers", []),
                  *pod_spec.get("ephemeralContainers", [])]
    # -- baseline
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(field):
            found.append(f"host namespaces: {field} must be unset or false")
    if (pod_security.get("windowsOptions") or {}).get("hostProcess"):
        found.append("HostProcess pods are not allowed")
    for volume in pod_spec.get("volumes", []):
        if "hostPath" in volume:
            found.append(f"volume {volume.get('name')}: hostPath volumes are not allowed")
    for sysctl in pod_security.get("sysctls", []):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl.get('name')} is not in the safe set")
    if (pod_security.get("seLinuxOptions") or {}).get("type") not in SELINUX_TYPES:
        found.append("pod seLinuxOptions.type is not allowed")
    if (pod_security.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
        found.append("pod appArmorProfile must be RuntimeDefault or Localhost")
    for container in containers:
        name = container.get("name")
        security = container.get("securityContext") or {}
        if security.get("privileged"):
            found.append(f"container {name}: privileged")
        added = set((security.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.append(f"container {name}: adds capabilities beyond baseline: {sorted(added - BASELINE_CAPABILITIES)}")
        for port in container.get("ports", []):
            if port.get("hostPort"):
                found.append(f"container {name}: hostPort {port['hostPort']}")
        if security.get("procMount") not in (None, "Default"):
            found.append(f"container {name}: procMount must be Default")
        if (security.get("seLinuxOptions") or {}).get("type") not in SELINUX_TYPES:
            found.append(f"container {name}: seLinuxOptions.type is not allowed")
        if (security.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"container {name}: appArmorProfile must be RuntimeDefault or Localhost")
        # -- restricted
        if security.get("allowPrivilegeEscalation") is not False:
            found.append(f"container {name}: allowPrivilegeEscalation must be false")
        if security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is not True:
            found.append(f"container {name}: runAsNonRoot must be true (pod or container)")
        if security.get("runAsUser", pod_security.get("runAsUser")) == 0:
            found.append(f"container {name}: runAsUser must not be 0")
        seccomp = (security.get("seccompProfile") or pod_security.get("seccompProfile") or {}).get("type")
        if seccomp not in SECCOMP_OK:
            found.append(f"container {name}: seccompProfile must be RuntimeDefault or Localhost (pod or container)")
        capabilities = security.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"container {name}: capabilities must drop ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"container {name}: may add only NET_BIND_SERVICE")
    if pod_security.get("runAsUser") == 0:
        found.append("pod runAsUser must not be 0")
    if (pod_security.get("seccompProfile") or {}).get("type") not in (None, *SECCOMP_OK):
        found.append("pod seccompProfile must be RuntimeDefault or Localhost")
    for volume in pod_spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if kinds - VOLUME_TYPES:
            found.append(f"volume {volume.get('name')}: type {sorted(kinds - VOLUME_TYPES)} is not allowed")
    return found
