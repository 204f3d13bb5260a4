// Package fsquota will hold project quotas for emptyDir volumes on XFS and
// ext4: project IDs through the FS_IOC_FSGETXATTR/FS_IOC_FSSETXATTR ioctls,
// limits and usage through quotactl_fd, and /etc/projects-style bookkeeping
// that survives restarts.
package fsquota
