//go:build !linux

package emptydir

import "k8s.io/klog/v2"

// sessions: no mount IDs here, so nothing is ever adopted.
type sessions struct{}

func startSessions(string, klog.Logger) *sessions { return &sessions{} }

func (*sessions) run(<-chan struct{}) {}
