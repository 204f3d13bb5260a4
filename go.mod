module github.com/nodevol/nodevol

go 1.26.0

require (
	github.com/moby/sys/mountinfo v0.7.3
	golang.org/x/sys v0.49.0
	k8s.io/klog/v2 v2.140.0
	k8s.io/mount-utils v0.37.2
	k8s.io/utils v0.0.0-20261023123148-ca04ba58ecab
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
)

tool honnef.co/go/tools/cmd/staticcheck
