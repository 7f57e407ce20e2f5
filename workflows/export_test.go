package workflows

// What the external tests (package workflows_test, which runs the workflows under
// worker.Options) read of the package's inside.
const (
	MaxHeldNotifications = maxHeldNotifications
	IdleFallback         = idleFallback
)
