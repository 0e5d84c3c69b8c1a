"""quiesce.adapters"""
