package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/brokerswitch/brokerswitch/metrics"
)

// release is the version of brokerswitch this source is. It is written here, not taken
// from a tag, because it names the workflows' commands: every change that alters them
// follows the rule in docs/development.md ("Changing a workflow") and raises it. The stamped
// `git describe` says which build of the release a binary is, as SemVer build metadata
// (1.1.0+e701bf5-dirty), so that two builds of one release stay apart.
const release = "1.1.0"

// version and revision are set at link time (-ldflags "-X main.version=... -X
// main.revision=..."), by `make build` and the Dockerfile. They are the only package-level
// variables of the binary because -X can set nothing else; read them through buildInfo.
var (
	version  string
	revision string
)

// buildInfo says which build this binary is: the release, with the stamped version (else
// the module version Go derived from the VCS) as its build metadata; the stamped
// revision, else the commit Go's VCS stamping recorded (marked "-dirty" for a modified
// tree); and the Go version.
func buildInfo() metrics.BuildInfo {
	info := metrics.BuildInfo{Version: version, Revision: revision, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return withUnknowns(info)
	}
	info.GoVersion = bi.GoVersion
	if info.Version == "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Revision == "" {
		var rev string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" && modified {
			rev += "-dirty"
		}
		info.Revision = rev
	}
	return withUnknowns(info)
}

func withUnknowns(info metrics.BuildInfo) metrics.BuildInfo {
	info.Version = releaseVersion(info.Version)
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

func printVersion(w io.Writer, info metrics.BuildInfo) error {
	_, err := fmt.Fprintf(w, "brokerswitch %s\ncommit: %s\ngo: %s\n", info.Version, info.Revision, info.GoVersion)
	return err
}

// releaseVersion is the release with build, a describe string or module version, as its
// build metadata; the release alone when build is unknown or is the release's own tag.
func releaseVersion(build string) string {
	build = strings.TrimPrefix(build, "v")
	if build == "" || build == "dev" || build == release {
		return release
	}
	return release + "+" + strings.ReplaceAll(build, "+", ".")
}
