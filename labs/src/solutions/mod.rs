//! The reference solutions: what each checker is tested against (labs/tests/), and the
//! building blocks later labs start from (lab 3 uses lab 2's command queue, and so on).
//! Try a lab before you read its solution.

pub mod lab1;
pub mod lab2;
pub mod lab3;
pub mod lab4;
pub mod lab5;
pub mod lab6;
pub mod lab7;
pub mod lab8;
pub mod lab9;
