//go:build !linux

package emptydir

import "github.com/go-logr/logr"

// sessions: no mount IDs here, so nothing is ever adopted.
type sessions struct{}

func startSessions(string, logr.Logger) *sessions { return &sessions{} }

func (*sessions) run(<-chan struct{}) {}
