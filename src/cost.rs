//! The analytic cost model (planner).
