// Package emptydir will hold the kubernetes.io/empty-dir plugin: SetUp and
// TearDown for the Default, Memory and HugePages media, built on
// mountdetect (so teardown never deletes data on another mount) and fsquota.
package emptydir
