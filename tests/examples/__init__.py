"""The examples of examples/, started and checked as a user would check a service."""
