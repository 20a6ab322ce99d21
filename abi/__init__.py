"""Input/output ABI contract: records, validation, diff, frame geometry."""
