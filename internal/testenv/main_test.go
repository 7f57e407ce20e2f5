package testenv

import "testing"

func TestMain(m *testing.M) { Exit(Run(m)) }
