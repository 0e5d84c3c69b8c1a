"""quiesce.testing"""
