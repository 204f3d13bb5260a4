// Package reconciler will hold the desired and actual state of world, the
// reconciler loop, the operation executor with nested pending operations
// and exponential backoff, reconstruction after a restart, and the Manager
// facade that custom kubelets embed.
package reconciler
