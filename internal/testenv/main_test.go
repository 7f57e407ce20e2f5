package testenv

import "testing"

func TestMain(m *testing.M) { Exit(m.Run()) }
